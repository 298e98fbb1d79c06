//! The backend of a model whose configuration names neither backend nor platform, found
//! as Triton's server-side auto-completion finds it (core `AutoCompleteBackendFields`,
//! which runs whatever `--strict-model-config` says): from a framework's model file named
//! by `default_model_filename` or present in the newest version directory (`model.py` is
//! the python backend's, `model.plan` TensorRT's, ...), else from the model name's
//! extension (a model named `model.identity` is served by the `identity` backend). Nereid's
//! own backends are looked for by their files before this runs.

use std::path::Path;

use crate::config::ModelConfig;
use crate::error::{Error, Result};

/// A framework Triton recognises by its model file.
struct Framework {
    backend: &'static str,
    /// Filled in beside the backend where the framework has one.
    platform: &'static str,
    file: &'static str,
    /// What the file must be to count: a directory, a plain file, or either (`None`).
    directory: Option<bool>,
}

/// In the order Triton tries them.
const FRAMEWORKS: &[Framework] = &[
    Framework {
        backend: "tensorflow",
        platform: "tensorflow_savedmodel",
        file: "model.savedmodel",
        directory: Some(true),
    },
    Framework {
        backend: "tensorflow",
        platform: "tensorflow_graphdef",
        file: "model.graphdef",
        directory: Some(false),
    },
    Framework {
        backend: "tensorrt",
        platform: "tensorrt_plan",
        file: "model.plan",
        directory: Some(false),
    },
    Framework {
        backend: "onnxruntime",
        platform: "onnxruntime_onnx",
        file: "model.onnx",
        directory: None,
    },
    Framework {
        backend: "openvino",
        platform: "",
        file: "model.xml",
        directory: None,
    },
    Framework {
        backend: "pytorch",
        platform: "pytorch_libtorch",
        file: "model.pt",
        directory: Some(false),
    },
    Framework {
        backend: "python",
        platform: "",
        file: "model.py",
        directory: None,
    },
];

/// Fills in `backend`, and the platform and default model file that go with it, for a
/// configuration of model `name` that names no backend. A configuration with a platform
/// Nereid does not know is left as it is, for the caller's error; one with nothing to go
/// by and a name without an extension is refused as Triton refuses it.
pub(super) fn complete(
    config: &mut ModelConfig,
    name: &str,
    newest_version_dir: &Path,
) -> Result<()> {
    if !config.backend.is_empty() {
        return Ok(());
    }
    if !config.platform.is_empty() {
        // A platform Nereid does not know: the default model file may still name a
        // backend (all but TensorFlow's, which needs its platform), and the platform is
        // kept for the configuration check to refuse the pair, as Triton does.
        if let Some(framework) = FRAMEWORKS
            .iter()
            .find(|f| f.backend != "tensorflow" && f.file == config.default_model_filename)
        {
            config.backend = framework.backend.into();
        }
        return Ok(());
    }
    let framework = match config.default_model_filename.as_str() {
        "" => FRAMEWORKS.iter().find(|f| present(f, newest_version_dir)),
        file => FRAMEWORKS.iter().find(|f| f.file == file),
    };
    if let Some(framework) = framework {
        config.backend = framework.backend.into();
        config.platform = framework.platform.into();
        // Triton leaves PyTorch's file name unset when it found the file by looking (its
        // backend knows the name); every other framework's is filled in.
        let found_by_looking = config.default_model_filename.is_empty();
        if found_by_looking && framework.backend != "pytorch" {
            config.default_model_filename = framework.file.into();
        }
        return Ok(());
    }
    if !config.default_model_filename.is_empty() {
        return Ok(());
    }
    let Some((_, backend)) = name.split_once('.') else {
        return Err(Error::invalid_arg(format!(
            "Invalid model name: Could not determine backend for model '{name}' with no \
             backend in model configuration. Expected model name of the form \
             'model.<backend_name>'."
        )));
    };
    config.default_model_filename = format!("model.{backend}");
    config.backend = backend.into();
    Ok(())
}

/// Whether `framework`'s model file is in `dir`, as the kind of entry it must be.
fn present(framework: &Framework, dir: &Path) -> bool {
    let path = dir.join(framework.file);
    match framework.directory {
        None => path.exists(),
        Some(directory) => path.exists() && path.is_dir() == directory,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The (backend, platform, default model file) completed for model `name` whose
    /// newest version holds `files` (a trailing `/` makes a directory).
    fn completed(
        name: &str,
        config: ModelConfig,
        files: &[&str],
    ) -> Result<(String, String, String)> {
        let dir = tempfile::tempdir().expect("temp dir");
        for file in files {
            match file.strip_suffix('/') {
                Some(folder) => std::fs::create_dir(dir.path().join(folder)).expect("mkdir"),
                None => std::fs::write(dir.path().join(file), b"").expect("write"),
            }
        }
        let mut config = config;
        complete(&mut config, name, dir.path())?;
        Ok((
            config.backend,
            config.platform,
            config.default_model_filename,
        ))
    }

    fn triple(backend: &str, platform: &str, file: &str) -> (String, String, String) {
        (backend.into(), platform.into(), file.into())
    }

    #[test]
    fn a_framework_is_found_by_the_file_in_the_newest_version() {
        let found = |files: &[&str]| completed("m", ModelConfig::default(), files).expect("found");
        assert_eq!(found(&["model.py"]), triple("python", "", "model.py"));
        assert_eq!(
            found(&["model.plan"]),
            triple("tensorrt", "tensorrt_plan", "model.plan")
        );
        assert_eq!(
            found(&["model.pt"]),
            triple("pytorch", "pytorch_libtorch", "")
        );
        assert_eq!(
            found(&["model.savedmodel/"]),
            triple("tensorflow", "tensorflow_savedmodel", "model.savedmodel")
        );
        // A plan that is a folder is not TensorRT's; model.py then decides.
        assert_eq!(
            found(&["model.plan/", "model.py"]),
            triple("python", "", "model.py")
        );
        // Triton's order: TensorRT before python.
        assert_eq!(found(&["model.py", "model.plan"]).0, "tensorrt");
    }

    #[test]
    fn a_named_default_model_file_decides_without_looking() {
        let config = ModelConfig {
            default_model_filename: "model.py".into(),
            ..Default::default()
        };
        assert_eq!(
            completed("m", config, &[]).expect("found"),
            triple("python", "", "model.py")
        );
        // An unknown file name is left for the caller's error.
        let config = ModelConfig {
            default_model_filename: "weights.bin".into(),
            ..Default::default()
        };
        assert_eq!(completed("m", config, &["model.py"]).expect("left").0, "");
    }

    #[test]
    fn otherwise_the_model_name_names_a_custom_backend() {
        assert_eq!(
            completed("model.identity", ModelConfig::default(), &[]).expect("named"),
            triple("identity", "", "model.identity")
        );
        let refused = completed("plain", ModelConfig::default(), &["weights.bin"])
            .expect_err("nothing to go by");
        assert_eq!(
            refused.message(),
            "Invalid model name: Could not determine backend for model 'plain' with no backend \
             in model configuration. Expected model name of the form 'model.<backend_name>'."
        );
    }

    #[test]
    fn a_named_backend_or_platform_is_left_alone() {
        let config = ModelConfig {
            platform: "mystery".into(),
            ..Default::default()
        };
        assert_eq!(
            completed("m.x", config, &["model.py"]).expect("left"),
            triple("", "mystery", "")
        );
        let config = ModelConfig {
            backend: "identity".into(),
            ..Default::default()
        };
        assert_eq!(
            completed("m", config, &["model.py"]).expect("left").0,
            "identity"
        );
        // A misspelt platform beside a framework's file: the file's backend, the platform
        // kept (L0_model_config's invalid_platform).
        let config = ModelConfig {
            platform: "onnxruntim".into(),
            default_model_filename: "model.onnx".into(),
            ..Default::default()
        };
        assert_eq!(
            completed("m", config, &[]).expect("named"),
            triple("onnxruntime", "onnxruntim", "model.onnx")
        );
    }
}
