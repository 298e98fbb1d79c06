//! Custom batching strategies: a model's own rule for which queued requests join a batch
//! (Triton's `TRITONBACKEND_ModelBatch*` functions, from the library a model names with
//! `TRITON_BATCH_STRATEGY_PATH` or puts beside it as `batchstrategy.so`). The dynamic
//! batcher keeps its own limits (maximum and preferred sizes, shapes, delays); a strategy
//! can only end a batch before the next request.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::model::ModelSpec;
use crate::request::InferRequest;

/// A model version's batching rule, consulted by its dynamic batcher's one task.
pub trait BatchStrategy: Send + Sync {
    /// Starts deciding one batch; the decision ends when the returned cut is dropped.
    fn start_batch(&self) -> Box<dyn BatchCut + '_>;
}

/// One batch being decided.
pub trait BatchCut {
    /// Whether `request` joins the batch after the ones already included.
    fn include(&mut self, request: &InferRequest) -> bool;
}

/// Opens the strategy libraries models name (Triton's C ABI, an edge above the core).
pub trait BatchStrategyLoader: Send + Sync {
    /// The directory of backend `backend`, the last place `batchstrategy.so` is looked
    /// for (Triton's `<backend-directory>/<backend>`).
    fn backend_directory(&self, backend: &str) -> Option<PathBuf>;

    /// The strategy in `library` for `spec`, whose directory is `model_dir`; `None` when
    /// the library defines no batching function (Triton then batches as usual).
    fn load(
        &self,
        library: &Path,
        spec: &Arc<ModelSpec>,
        model_dir: &Path,
    ) -> Result<Option<Arc<dyn BatchStrategy>>>;
}

/// The model configuration parameter naming a strategy library.
pub const STRATEGY_PATH_PARAMETER: &str = "TRITON_BATCH_STRATEGY_PATH";
/// The library looked for in the version, model and backend directories when none is
/// named.
const DEFAULT_LIBRARY: &str = "batchstrategy.so";

/// The strategy library `spec` uses, if any: the one its configuration names (which must
/// exist), else `batchstrategy.so` in its version directory, its model directory, then
/// `backend_dir`, as Triton searches. Sequence batching cannot take one (Triton refuses
/// the load).
pub fn strategy_library(
    spec: &ModelSpec,
    model_dir: &Path,
    backend_dir: Option<&Path>,
) -> Result<Option<PathBuf>> {
    let named = spec
        .config
        .parameters
        .get(STRATEGY_PATH_PARAMETER)
        .map(|p| PathBuf::from(&p.string_value));
    if spec.scheduling.sequence().is_some() {
        return match named {
            Some(_) => Err(Error::invalid_arg(format!(
                "{STRATEGY_PATH_PARAMETER} cannot be specified with sequence batcher, using default batching strategy"
            ))),
            None => Ok(None),
        };
    }
    if let Some(path) = named {
        if !path.exists() {
            return Err(Error::not_found(format!(
                "Batching library path not found: {}",
                path.display()
            )));
        }
        return Ok(Some(path));
    }
    let version_dir = model_dir.join(spec.version.to_string());
    let found = [Some(version_dir.as_path()), Some(model_dir), backend_dir]
        .into_iter()
        .flatten()
        .map(|dir| dir.join(DEFAULT_LIBRARY))
        .find(|path| path.exists());
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    fn spec(extra: &str) -> Arc<ModelSpec> {
        let config = format!(
            r#"backend: "fake" max_batch_size: 8
               input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }} ]
               output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] }} ]
               {extra}"#
        );
        testing::spec("m", &config)
    }

    fn named(path: &Path) -> String {
        format!(
            r#"parameters {{ key: "{STRATEGY_PATH_PARAMETER}" value {{ string_value: "{}" }} }}"#,
            path.display()
        )
    }

    #[test]
    fn a_named_library_must_exist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope.so");
        let err = strategy_library(&spec(&named(&missing)), dir.path(), None).expect_err("refused");
        assert_eq!(
            err.to_string(),
            format!("Batching library path not found: {}", missing.display())
        );
        let present = dir.path().join("mine.so");
        std::fs::write(&present, b"").expect("write");
        assert_eq!(
            strategy_library(&spec(&named(&present)), dir.path(), None).expect("found"),
            Some(present)
        );
    }

    #[test]
    fn the_default_library_is_found_in_the_version_model_then_backend_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let backend = tempfile::tempdir().expect("tempdir");
        let version = dir.path().join("1");
        std::fs::create_dir(&version).expect("mkdir");
        let find = || strategy_library(&spec(""), dir.path(), Some(backend.path())).expect("ok");
        assert_eq!(find(), None);
        std::fs::write(backend.path().join(DEFAULT_LIBRARY), b"").expect("write");
        assert_eq!(find(), Some(backend.path().join(DEFAULT_LIBRARY)));
        std::fs::write(dir.path().join(DEFAULT_LIBRARY), b"").expect("write");
        assert_eq!(find(), Some(dir.path().join(DEFAULT_LIBRARY)));
        std::fs::write(version.join(DEFAULT_LIBRARY), b"").expect("write");
        assert_eq!(find(), Some(version.join(DEFAULT_LIBRARY)));
    }

    #[test]
    fn sequence_batching_refuses_a_named_library() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("mine.so");
        let sequence = format!("sequence_batching {{ }}\n{}", named(&path));
        let err = strategy_library(&spec(&sequence), dir.path(), None).expect_err("refused");
        assert!(err
            .to_string()
            .contains("cannot be specified with sequence batcher"));
        assert_eq!(
            strategy_library(&spec("sequence_batching { }"), dir.path(), None).expect("ok"),
            None
        );
    }
}
