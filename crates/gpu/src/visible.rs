//! Which GPUs the server reports: those CUDA would show it. Triton polls the devices
//! `cudaGetDeviceCount` sees, so `CUDA_VISIBLE_DEVICES` narrows its GPU metrics; Nereid
//! applies the same variable to NVML's list (NVML itself ignores it).

/// The entries of `devices` (NVML's order, each with its UUID) that `CUDA_VISIBLE_DEVICES`
/// = `setting` selects, in the setting's order. As the CUDA runtime reads it: unset means
/// every device; each entry is an index or a UUID (or a unique prefix of one, with or
/// without `GPU-`); the list ends at the first entry that names no device, or a device
/// already named.
pub(crate) fn visible<D: Copy>(devices: &[(D, String)], setting: Option<&str>) -> Vec<(D, String)> {
    let Some(setting) = setting else {
        return devices.to_vec();
    };
    let mut chosen: Vec<usize> = Vec::new();
    for entry in setting.split(',').map(str::trim) {
        let Some(index) = lookup(devices, entry) else {
            break;
        };
        if chosen.contains(&index) {
            break;
        }
        chosen.push(index);
    }
    chosen.into_iter().map(|i| devices[i].clone()).collect()
}

/// The index of the device `entry` names, if exactly one.
fn lookup<D>(devices: &[(D, String)], entry: &str) -> Option<usize> {
    if !entry.is_empty() && entry.bytes().all(|b| b.is_ascii_digit()) {
        return entry.parse::<usize>().ok().filter(|i| *i < devices.len());
    }
    let wanted = entry.strip_prefix("GPU-").unwrap_or(entry);
    if wanted.is_empty() {
        return None;
    }
    let mut matches = devices.iter().enumerate().filter(|(_, (_, uuid))| {
        uuid.strip_prefix("GPU-")
            .unwrap_or(uuid)
            .starts_with(wanted)
    });
    match (matches.next(), matches.next()) {
        (Some((index, _)), None) => Some(index),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devices() -> Vec<(u8, String)> {
        vec![
            (0, "GPU-aaaa1111".to_string()),
            (1, "GPU-aaaa2222".to_string()),
            (2, "GPU-bbbb3333".to_string()),
        ]
    }

    fn ids(setting: Option<&str>) -> Vec<u8> {
        visible(&devices(), setting)
            .into_iter()
            .map(|(d, _)| d)
            .collect()
    }

    #[test]
    fn unset_shows_every_device() {
        assert_eq!(ids(None), [0, 1, 2]);
    }

    #[test]
    fn indices_and_uuids_in_the_settings_order() {
        assert_eq!(ids(Some("2,0")), [2, 0]);
        assert_eq!(ids(Some("GPU-bbbb3333")), [2]);
        assert_eq!(ids(Some("aaaa2")), [1], "a unique prefix without GPU-");
    }

    #[test]
    fn the_list_ends_at_an_entry_naming_no_single_device() {
        assert_eq!(ids(Some("")), Vec::<u8>::new(), "empty: no GPU");
        assert_eq!(ids(Some("-1")), Vec::<u8>::new());
        assert_eq!(ids(Some("1,7,0")), [1], "7 does not exist");
        assert_eq!(ids(Some("0,GPU-aaaa,2")), [0], "ambiguous prefix");
        assert_eq!(ids(Some("0,0,1")), [0], "named twice");
    }
}
