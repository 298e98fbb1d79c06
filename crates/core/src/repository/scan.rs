//! Reading model directories: which models the repositories hold, their version
//! directories, their `config.pbtxt`, and a change signature for polling.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::config::{is_ensemble, parse_model_config, ModelConfig};

use crate::error::{Error, Result};

/// Model name → its directory, or why the name cannot be used.
pub type ModelDirs = BTreeMap<String, Result<PathBuf>>;

/// A model directory's contents for change detection: (path, size, modification time).
pub type Signature = Vec<(PathBuf, u64, Option<SystemTime>)>;

/// Every model directory across `roots`: name → directory. A name found in two roots is
/// an error for that name, as in Triton.
pub fn list_models(roots: &[PathBuf]) -> Result<ModelDirs> {
    let mut models: BTreeMap<String, Result<PathBuf>> = BTreeMap::new();
    for root in roots {
        let entries = std::fs::read_dir(root).map_err(|e| {
            Error::internal(format!(
                "failed to read model repository {}: {e}",
                root.display()
            ))
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            // Every subdirectory is a model, hidden ones too (a model may be called
            // `...`), as Triton's repository reads its directory.
            if !path.is_dir() {
                continue;
            }
            let name = name.to_string();
            insert_model(&mut models, &name, Ok(path));
        }
    }
    Ok(models)
}

/// Adds model `name` found at `dir` to `models`; a name already there becomes an error
/// for that name, as in Triton.
pub(super) fn insert_model(models: &mut ModelDirs, name: &str, dir: Result<PathBuf>) {
    let entry = if models.contains_key(name) {
        Err(duplicate_model(name))
    } else {
        dir
    };
    models.insert(name.to_string(), entry);
}

/// The error for a model name that more than one repository holds.
pub(super) fn duplicate_model(name: &str) -> Error {
    Error::invalid_arg(format!(
        "model '{name}' appears in multiple model repositories"
    ))
}

/// The numeric version subdirectories of a model directory (others are ignored).
pub fn list_versions(model_dir: &Path) -> Vec<i64> {
    let Ok(entries) = std::fs::read_dir(model_dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            name.parse::<i64>().ok()
        })
        .collect()
}

/// The largest `config.pbtxt` read. Real configurations are a few KiB; the bound keeps a
/// link to `/dev/zero` or a runaway generated file from exhausting memory.
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// The configuration file of a model directory, in Triton's lookup order: with
/// `--model-config-name=<name>`, `configs/<name>.pbtxt` when that file exists; otherwise
/// `config.pbtxt`. A custom file that cannot be checked is logged with Triton's words
/// and the default file is used.
pub fn config_path(model_dir: &Path, config_name: Option<&str>) -> PathBuf {
    if let Some(name) = config_name {
        let custom = model_dir.join("configs").join(format!("{name}.pbtxt"));
        match custom.try_exists() {
            Ok(true) => {
                tracing::debug!(config = %custom.display(), "using the custom model configuration");
                return custom;
            }
            Ok(false) => {}
            Err(e) => tracing::error!(
                "Failed to get model configuration full path for '{}': {e}",
                model_dir.display()
            ),
        }
    }
    model_dir.join("config.pbtxt")
}

/// Reads the configuration of a model directory (see [`config_path`]); `Ok(None)` when
/// there is none. Only a regular file of at most [`MAX_CONFIG_BYTES`] is read: a FIFO or
/// a device would block or never end.
pub fn read_config(model_dir: &Path, config_name: Option<&str>) -> Result<Option<ModelConfig>> {
    let path = config_path(model_dir, config_name);
    let failed = |e: &dyn std::fmt::Display| {
        Error::invalid_arg(format!("failed to read {}: {e}", path.display()))
    };
    // `metadata` follows links and, unlike `open`, does not wait for a FIFO's writer.
    let meta = match std::fs::metadata(&path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(failed(&e)),
    };
    if !meta.is_file() {
        return Err(failed(&"not a regular file"));
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(failed(&format_args!(
            "{} bytes, more than the {MAX_CONFIG_BYTES} bytes a model configuration may have",
            meta.len()
        )));
    }
    let mut text = String::new();
    std::fs::File::open(&path)
        .and_then(|file| file.take(MAX_CONFIG_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| failed(&e))?;
    // The file may have grown since `metadata`.
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(failed(&format_args!(
            "more than the {MAX_CONFIG_BYTES} bytes a model configuration may have"
        )));
    }
    parse_model_config(&path, &text).map(Some)
}

/// The most entries [`signature`] records: a model directory that is a link to `/` or to
/// a tree of millions of files must not stall a poll. Real models hold a few files (a
/// python model with its own packages a few thousand).
pub const MAX_SIGNATURE_ENTRIES: usize = 20_000;

/// A fingerprint of a model directory's contents (paths, sizes, modification times), so
/// polling can tell whether anything changed. Links inside are not followed. Each
/// directory's entries are taken in name order, so a tree beyond
/// [`MAX_SIGNATURE_ENTRIES`] always gives the same first entries and a poll does not see
/// a change that did not happen (it misses changes past the limit).
pub fn signature(model_dir: &Path) -> Signature {
    signature_within(model_dir, MAX_SIGNATURE_ENTRIES)
}

/// [`signature`] of at most `limit` entries.
fn signature_within(model_dir: &Path, limit: usize) -> Signature {
    let mut out = Vec::new();
    let mut stack = vec![model_dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        // Pushed in reverse so the walk goes down in name order.
        for entry in entries.iter().rev() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
        for entry in entries {
            if out.len() == limit {
                out.sort();
                return out;
            }
            let Ok(meta) = entry.metadata() else { continue };
            out.push((entry.path(), meta.len(), meta.modified().ok()));
        }
    }
    out.sort();
    out
}

/// Whether the model directory `dir` holds an ensemble (by its configuration).
pub(super) fn is_ensemble_dir(dir: Option<&PathBuf>, config_name: Option<&str>) -> bool {
    dir.and_then(|d| read_config(d, config_name).ok().flatten())
        .is_some_and(|c| is_ensemble(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_models_versions_and_configs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let m = dir.path().join("m");
        std::fs::create_dir_all(m.join("1")).expect("mkdir");
        std::fs::create_dir_all(m.join("12")).expect("mkdir");
        std::fs::create_dir_all(m.join("x1")).expect("mkdir");
        std::fs::write(m.join("config.pbtxt"), "max_batch_size: 2").expect("write");
        std::fs::create_dir_all(dir.path().join("...")).expect("mkdir");
        std::fs::write(dir.path().join("notes.txt"), "not a model").expect("write");
        let models = list_models(&[dir.path().to_path_buf()]).expect("readable");
        assert_eq!(models.keys().collect::<Vec<_>>(), vec!["...", "m"]);
        let mut versions = list_versions(&m);
        versions.sort();
        assert_eq!(versions, vec![1, 12]);
        let config = read_config(&m, None).expect("valid").expect("present");
        assert_eq!(config.max_batch_size, 2);
        assert!(read_config(dir.path(), None).expect("no error").is_none());
        let before = signature(&m);
        std::fs::write(
            m.join("config.pbtxt"),
            "x".repeat(MAX_CONFIG_BYTES as usize + 1),
        )
        .expect("write");
        let error = read_config(&m, None).expect_err("too large");
        assert!(
            error.message().contains("more than the 4194304 bytes"),
            "{}",
            error.message()
        );
        std::fs::remove_file(m.join("config.pbtxt")).expect("remove");
        std::os::unix::fs::symlink("/dev/zero", m.join("config.pbtxt")).expect("link");
        let error = read_config(&m, None).expect_err("a device");
        assert!(
            error
                .message()
                .ends_with("config.pbtxt: not a regular file"),
            "{}",
            error.message()
        );
        std::fs::write(m.join("1/model.onnx"), "x").expect("write");
        assert_ne!(before, signature(&m));
    }

    #[test]
    fn a_model_directory_linked_to_the_root_gives_a_bounded_stable_signature() {
        let dir = tempfile::tempdir().expect("temp dir");
        let m = dir.path().join("m");
        std::os::unix::fs::symlink("/", &m).expect("link");
        let first = signature(&m);
        assert!(!first.is_empty() && first.len() <= MAX_SIGNATURE_ENTRIES);
    }

    #[test]
    fn past_the_limit_the_same_entries_are_taken_each_time() {
        let dir = tempfile::tempdir().expect("temp dir");
        for d in ["a", "b", "c"] {
            for f in ["1", "2", "3"] {
                let path = dir.path().join(d).join(f);
                std::fs::create_dir_all(&path).expect("mkdir");
                std::fs::write(path.join("model.onnx"), d).expect("write");
            }
        }
        let names = |s: Signature| -> Vec<String> {
            let root = dir.path();
            s.into_iter()
                .map(|(p, _, _)| p.strip_prefix(root).expect("inside").display().to_string())
                .collect()
        };
        let first = names(signature_within(dir.path(), 7));
        // Name order, depth first: a, b, c, then a's version folders, then a/1's file.
        assert_eq!(
            first,
            ["a", "a/1", "a/1/model.onnx", "a/2", "a/3", "b", "c"]
        );
        for _ in 0..5 {
            assert_eq!(names(signature_within(dir.path(), 7)), first);
        }
    }
}
