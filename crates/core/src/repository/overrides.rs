//! What a repository load request may replace: the configuration (`config`, JSON) and
//! the model's files (`file:<version>/<name>` parameters). As in Triton, files need a
//! `config`, and the model then loads from a directory holding only those files, not
//! from its directory in the repository. Unlike Triton 2.51, which aborts on a path
//! component longer than the filesystem allows, every name is checked before anything
//! is written: a name that leaves the directory is INVALID_ARG (Triton's words), one
//! beyond the filesystem's limits INTERNAL (the status Triton's own model-control
//! example expects).

use std::path::{Component, Path, PathBuf};

use bytes::Bytes;

use crate::error::{Error, Result};

/// The prefix of a file parameter's name.
pub const FILE_PREFIX: &str = "file:";

/// Longest path component a file parameter may name (Linux `NAME_MAX`).
const MAX_COMPONENT_BYTES: usize = 255;

/// Longest relative path a file parameter may name (Linux `PATH_MAX`).
const MAX_PATH_BYTES: usize = 4096;

/// Most files one load request may carry.
pub const MAX_OVERRIDE_FILES: usize = 4096;

/// The parameters of a load request, as the frontends decoded them.
#[derive(Debug, Default, Clone)]
pub struct LoadRequest {
    /// `config`: a JSON model configuration replacing `config.pbtxt`.
    pub config: Option<String>,
    /// `file:` parameters: (parameter name, content).
    pub files: Vec<(String, Bytes)>,
}

/// Checks a `file:` parameter name and returns its path relative to the model
/// directory: relative, inside the directory, within the filesystem's name limits.
pub fn override_path(key: &str) -> Result<PathBuf> {
    let invalid = |why: &str| Error::invalid_arg(format!("Invalid file parameter '{key}': {why}"));
    let relative = key
        .strip_prefix(FILE_PREFIX)
        .ok_or_else(|| invalid("the name must start with 'file:'"))?;
    if relative.contains('\0') {
        return Err(invalid("the path contains a NUL byte"));
    }
    // Names beyond the filesystem's limits are INTERNAL, as the write failure they would
    // be is in Triton (whose own model-control example checks that status).
    let too_long = |why: String| Error::internal(format!("Invalid file parameter '{key}': {why}"));
    if relative.len() > MAX_PATH_BYTES {
        return Err(too_long(format!(
            "the path is longer than {MAX_PATH_BYTES} bytes"
        )));
    }
    let mut path = PathBuf::new();
    for component in Path::new(relative).components() {
        match component {
            Component::Normal(part) => {
                if part.len() > MAX_COMPONENT_BYTES {
                    return Err(too_long(format!(
                        "a path component is longer than {MAX_COMPONENT_BYTES} bytes"
                    )));
                }
                path.push(part);
            }
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(invalid(
                    "the path must be relative and stay within the model directory",
                ))
            }
        }
    }
    if path.as_os_str().is_empty() {
        return Err(invalid("the path names no file"));
    }
    Ok(path)
}

/// Checks every file name of `request` (before anything is written).
pub fn check_files(request: &LoadRequest) -> Result<Vec<(PathBuf, Bytes)>> {
    if request.files.len() > MAX_OVERRIDE_FILES {
        return Err(Error::invalid_arg(format!(
            "a load request may carry at most {MAX_OVERRIDE_FILES} file parameters"
        )));
    }
    if request.config.is_none() {
        return Err(Error::invalid_arg(
            "Load parameter 'config' must be specified for model file override",
        ));
    }
    request
        .files
        .iter()
        .map(|(key, content)| Ok((override_path(key)?, content.clone())))
        .collect()
}

/// Writes `files` into a new temporary model directory, removed when dropped. Blocking.
pub fn write_model_dir(files: &[(PathBuf, Bytes)]) -> Result<tempfile::TempDir> {
    let failed = |what: &str, path: &Path, e: std::io::Error| {
        Error::internal(format!(
            "cannot write the override model directory ({what} '{}'): {e}",
            path.display()
        ))
    };
    let dir = tempfile::Builder::new()
        .prefix("nereid-load-")
        .tempdir()
        .map_err(|e| failed("creating", &std::env::temp_dir(), e))?;
    for (relative, content) in files {
        let path = dir.path().join(relative);
        if let Some(parent) = path.parent() {
            if parent.is_file() {
                return Err(Error::invalid_arg(format!(
                    "Invalid file parameter '{FILE_PREFIX}{}', directory has been created as a file",
                    relative.display()
                )));
            }
            std::fs::create_dir_all(parent).map_err(|e| failed("creating", parent, e))?;
        }
        if path.is_dir() {
            return Err(Error::invalid_arg(format!(
                "Invalid file parameter '{FILE_PREFIX}{}': a directory of another file parameter has this path",
                relative.display()
            )));
        }
        std::fs::write(&path, content).map_err(|e| failed("writing", &path, e))?;
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(files: &[(&str, &[u8])]) -> LoadRequest {
        LoadRequest {
            config: Some("{}".into()),
            files: files
                .iter()
                .map(|(k, v)| (k.to_string(), Bytes::copy_from_slice(v)))
                .collect(),
        }
    }

    #[test]
    fn names_must_stay_inside_and_fit_the_filesystem() {
        assert_eq!(
            override_path("file:1/model.onnx").expect("valid"),
            PathBuf::from("1/model.onnx")
        );
        assert_eq!(
            override_path("file:./1//x").expect("valid"),
            PathBuf::from("1/x")
        );
        for (key, why) in [
            ("file:../x", "stay within the model directory"),
            ("file:1/../../x", "stay within the model directory"),
            ("file:/etc/passwd", "stay within the model directory"),
            ("file:", "names no file"),
            ("file:.", "names no file"),
            ("file:a\0b", "NUL"),
        ] {
            let e = override_path(key).expect_err(key);
            assert!(e.message().contains(why), "{key}: {}", e.message());
            assert!(e
                .message()
                .starts_with(&format!("Invalid file parameter '{key}'")));
        }
        let long = format!("file:{}", "A".repeat(256));
        assert!(override_path(&long)
            .expect_err("long")
            .message()
            .contains("longer than 255 bytes"));
        assert!(override_path(&format!("file:{}", "a/".repeat(2100)))
            .expect_err("long path")
            .message()
            .contains("longer than 4096 bytes"));
    }

    #[test]
    fn files_need_a_config_and_land_where_they_say() {
        let mut no_config = request(&[("file:1/model.onnx", b"x")]);
        no_config.config = None;
        assert_eq!(
            check_files(&no_config).expect_err("no config").message(),
            "Load parameter 'config' must be specified for model file override"
        );
        let files = check_files(&request(&[
            ("file:1/model.onnx", b"abc"),
            ("file:labels.txt", b"l"),
        ]))
        .expect("valid");
        let dir = write_model_dir(&files).expect("written");
        assert_eq!(
            std::fs::read(dir.path().join("1/model.onnx")).expect("read"),
            b"abc"
        );
        assert_eq!(
            std::fs::read(dir.path().join("labels.txt")).expect("read"),
            b"l"
        );
        let kept = dir.path().to_path_buf();
        drop(dir);
        assert!(!kept.exists(), "removed with the handle");
    }

    #[test]
    fn a_file_where_a_directory_must_go_is_refused() {
        let files = check_files(&request(&[("file:1", b"x"), ("file:1/model.onnx", b"y")]))
            .expect("names are valid");
        let e = write_model_dir(&files).expect_err("conflict");
        assert!(
            e.message().contains("directory has been created as a file"),
            "{}",
            e.message()
        );
    }
}
