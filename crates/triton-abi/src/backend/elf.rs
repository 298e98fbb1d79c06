//! Reads the libraries an ELF shared object needs (`DT_NEEDED`), for 64-bit
//! little-endian files (the only kind this server runs as). Every offset is checked
//! against the file, so a damaged library is an error, not a crash.

/// `PT_LOAD`, `PT_DYNAMIC`.
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
/// `DT_NULL`, `DT_NEEDED`, `DT_STRTAB`.
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;

fn u16_at(data: &[u8], at: usize) -> Result<u16, String> {
    data.get(at..at + 2)
        .and_then(|b| b.try_into().ok())
        .map(u16::from_le_bytes)
        .ok_or_else(|| format!("truncated at offset {at}"))
}

fn u32_at(data: &[u8], at: usize) -> Result<u32, String> {
    data.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| format!("truncated at offset {at}"))
}

fn u64_at(data: &[u8], at: usize) -> Result<u64, String> {
    data.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| format!("truncated at offset {at}"))
}

fn offset(value: u64) -> Result<usize, String> {
    usize::try_from(value).map_err(|_| format!("offset {value} out of range"))
}

/// One program header: type, file offset, virtual address, size in the file.
struct Segment {
    kind: u32,
    offset: u64,
    vaddr: u64,
    filesz: u64,
}

/// The names in `DT_NEEDED`, in order.
pub fn needed_libraries(data: &[u8]) -> Result<Vec<String>, String> {
    if data.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err("not an ELF file".into());
    }
    if data.get(4) != Some(&2) || data.get(5) != Some(&1) {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let phoff = offset(u64_at(data, 0x20)?)?;
    let phentsize = usize::from(u16_at(data, 0x36)?);
    let phnum = usize::from(u16_at(data, 0x38)?);
    let segments = (0..phnum)
        .map(|i| {
            let at = phoff + i * phentsize;
            Ok(Segment {
                kind: u32_at(data, at)?,
                offset: u64_at(data, at + 8)?,
                vaddr: u64_at(data, at + 16)?,
                filesz: u64_at(data, at + 32)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let Some(dynamic) = segments.iter().find(|s| s.kind == PT_DYNAMIC) else {
        return Ok(Vec::new());
    };
    let mut entries = Vec::new();
    let start = offset(dynamic.offset)?;
    for i in 0..offset(dynamic.filesz)? / 16 {
        let tag = u64_at(data, start + i * 16)?;
        if tag == DT_NULL {
            break;
        }
        entries.push((tag, u64_at(data, start + i * 16 + 8)?));
    }
    let strtab = entries
        .iter()
        .find(|(tag, _)| *tag == DT_STRTAB)
        .map(|(_, address)| *address)
        .ok_or("no dynamic string table")?;
    let strtab = segments
        .iter()
        .find(|s| s.kind == PT_LOAD && s.vaddr <= strtab && strtab < s.vaddr + s.filesz)
        .map(|s| strtab - s.vaddr + s.offset)
        .ok_or("the dynamic string table is outside the loaded segments")?;
    entries
        .iter()
        .filter(|(tag, _)| *tag == DT_NEEDED)
        .map(|(_, name)| {
            let at = offset(strtab + name)?;
            let rest = data.get(at..).ok_or("a needed name is outside the file")?;
            let end = rest
                .iter()
                .position(|b| *b == 0)
                .ok_or("a needed name is not terminated")?;
            Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_needed_libraries_of_a_real_library() {
        // This test binary itself needs libc.
        let exe = std::env::current_exe().expect("test binary");
        let needed = needed_libraries(&std::fs::read(exe).expect("readable")).expect("ELF");
        assert!(
            needed.iter().any(|n| n.starts_with("libc.so")),
            "{needed:?}"
        );
    }

    #[test]
    fn damaged_files_are_errors() {
        assert!(needed_libraries(b"not elf").is_err());
        let mut header = b"\x7fELF\x02\x01".to_vec();
        header.resize(0x40, 0);
        header[0x20] = 0xff;
        header[0x38] = 4;
        assert!(needed_libraries(&header).is_err());
    }
}
