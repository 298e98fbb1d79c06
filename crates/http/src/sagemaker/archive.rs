//! Where a SageMaker model archive's model is, by Triton's rules. SageMaker unpacks each
//! archive at `/opt/ml/models/<hash>/model`; the archive is either one model directory
//! (its `config.pbtxt` at the top) or a repository of model directories, of which the
//! ensemble, if any, is the model to load (its composing models load with it from the
//! same repository).

use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;

/// An archive at SageMaker's path: the repository to register and the model directory.
static SAGEMAKER_PATH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(/opt/ml/models/[0-9A-Za-z._]+)/(model)/?([0-9A-Za-z._]+)?$")
        .expect("a valid pattern")
});

/// An ensemble's configuration, as Triton recognizes it in the text.
static ENSEMBLE_PLATFORM: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"platform:(\s)*"ensemble""#).expect("a valid pattern"));

/// What to register for an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ArchiveLayout {
    /// The repository to register, as SageMaker's `modelUrl` shows it.
    pub repository: String,
    /// The directory in it that holds the model to load, mapped to the target name.
    pub model_dir: String,
}

/// Triton's reading of the archive at `url` (blocking: it lists and reads files). With a
/// `config.pbtxt` at the top the archive is one model: the repository is its parent and
/// the model directory `model`, which only SageMaker's own path yields (elsewhere the
/// repository is empty and registering it fails). Otherwise `url` is the repository, and
/// the model is its ensemble directory, else its last directory in listing order.
pub(super) fn layout(url: &str) -> ArchiveLayout {
    let (parent, subdir) = SAGEMAKER_PATH
        .captures(url)
        .map(|c| {
            let part = |i: usize| c.get(i).map_or("", |m| m.as_str()).to_string();
            (part(1), part(2))
        })
        .unwrap_or_default();
    if Path::new(&format!("{url}/config.pbtxt")).exists() {
        return ArchiveLayout {
            repository: parent,
            model_dir: subdir,
        };
    }
    ArchiveLayout {
        repository: url.to_string(),
        model_dir: model_dir(url),
    }
}

/// The directory of repository `url` to load: the last one whose configuration is an
/// ensemble, else the last one listed (symbolic links do not count, as in Triton).
fn model_dir(url: &str) -> String {
    let Ok(entries) = std::fs::read_dir(url) else {
        return String::new();
    };
    let mut last = String::new();
    let mut ensemble = None;
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let config = std::fs::read_to_string(entry.path().join("config.pbtxt"));
        if config.is_ok_and(|text| ENSEMBLE_PLATFORM.is_match(&text)) {
            tracing::info!(
                "SageMaker front-end detected an Ensemble config at path: {url}/{name}/config.pbtxt"
            );
            ensemble = Some(name.clone());
        }
        last = name;
    }
    ensemble.unwrap_or(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(root: &Path, name: &str, config: &str) {
        std::fs::create_dir_all(root.join(name).join("1")).expect("mkdir");
        std::fs::write(root.join(name).join("config.pbtxt"), config).expect("write");
    }

    #[test]
    fn a_repository_archive_loads_its_ensemble_else_its_model() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = dir.path().to_str().expect("UTF-8").to_string();
        model(dir.path(), "add_sub", "backend: \"onnxruntime\"");
        assert_eq!(
            layout(&url),
            ArchiveLayout {
                repository: url.clone(),
                model_dir: "add_sub".into()
            }
        );
        model(dir.path(), "pipeline", "platform:  \"ensemble\"");
        model(dir.path(), "zz_other", "backend: \"onnxruntime\"");
        assert_eq!(layout(&url).model_dir, "pipeline");
    }

    #[test]
    fn a_model_archive_registers_its_parent_on_sagemakers_path_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        model(dir.path(), "model", "backend: \"onnxruntime\"");
        let url = format!("{}/model", dir.path().display());
        assert_eq!(
            layout(&url),
            ArchiveLayout {
                repository: String::new(),
                model_dir: String::new()
            }
        );
        // The pattern alone, on a path this test cannot create.
        let c = SAGEMAKER_PATH
            .captures("/opt/ml/models/abc123/model/sub")
            .expect("SageMaker's path");
        assert_eq!(&c[1], "/opt/ml/models/abc123");
        assert_eq!(&c[2], "model");
        assert!(SAGEMAKER_PATH
            .captures("/opt/ml/models/a/b/model")
            .is_none());
    }

    #[test]
    fn a_missing_archive_is_its_own_empty_repository() {
        assert_eq!(
            layout("/nonexistent/archive"),
            ArchiveLayout {
                repository: "/nonexistent/archive".into(),
                model_dir: String::new()
            }
        );
    }
}
