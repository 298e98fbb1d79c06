//! Loading many models at once (start-up and each poll): at most
//! `--model-load-thread-count` load together (ONNX Runtime session creation is
//! CPU-bound), then the ensembles one at a time, so that each finds its composing
//! models loaded (or loads them) without racing the other loads. Triton's load pool
//! counts model versions; here a model's versions load one after another in one slot.

use std::sync::Arc;

use super::manager::{log_not_in_any_repository, ControlMode, ModelRepository};
use super::scan::{is_ensemble_dir, ModelDirs};
use crate::error::{Error, Result};

impl ModelRepository {
    /// Loads what the control mode says to load at start-up and returns the load failures
    /// (those models are recorded as unavailable). Fails only when a repository cannot be
    /// read, `--load-model` names an unknown model, or names `*` beside another model.
    pub async fn load_startup_models(self: &Arc<Self>) -> Result<Vec<Error>> {
        let startup = &self.options.startup_models;
        // Triton keeps the names as a set: `*` given twice is still alone.
        if self.options.control_mode == ControlMode::Explicit
            && startup.iter().any(|m| m == "*")
            && startup.iter().any(|m| m != "*")
        {
            return Err(Error::invalid_arg(
                "Wildcard model name '*' must be the ONLY startup model if specified at all.",
            ));
        }
        let models = self.scan().await?;
        let ids: Vec<String> = match self.options.control_mode {
            ControlMode::Explicit if !self.options.startup_models.iter().any(|m| m == "*") => {
                let mut ids = Vec::new();
                for name in &self.options.startup_models {
                    // Triton reads "" as the repository folder itself and fails to find
                    // its backend ("Invalid model name: ..."); here it is refused as such.
                    if name.is_empty() {
                        return Err(Error::invalid_arg(
                            "failed to load '', failed to poll from model repository: Invalid model name: a model name cannot be empty",
                        ));
                    }
                    let named = self.ids_named(models.keys(), name);
                    if named.is_empty() {
                        log_not_in_any_repository(name);
                        return Err(Error::invalid_arg(format!(
                            "failed to load '{name}', failed to poll from model repository: no such model"
                        )));
                    }
                    ids.extend(named);
                }
                ids
            }
            _ => models.keys().cloned().collect(),
        };
        let _admin = self.admin.lock().await;
        self.load_many(ids, models).await
    }

    /// Loads the models `ids` found in `dirs`, at most `--model-load-thread-count` at a
    /// time, the ensembles last; returns the failures (each logged). The caller holds the
    /// admin lock.
    pub(super) async fn load_many(
        self: &Arc<Self>,
        ids: Vec<String>,
        dirs: ModelDirs,
    ) -> Result<Vec<Error>> {
        let config_name = self.options.settings.flags.model_config_name.clone();
        let (ensembles, others): (Vec<String>, Vec<String>) = self
            .read_off_thread(
                "repository",
                "reading the configurations of the models",
                move || {
                    ids.into_iter().partition(|id| {
                        is_ensemble_dir(
                            dirs.get(id).and_then(|d| d.as_ref().ok()),
                            config_name.as_deref(),
                        )
                    })
                },
            )
            .await?;
        let limit = self.options.settings.flags.load_threads();
        let mut failures = Vec::new();
        let mut pending = others.into_iter();
        let mut loads = tokio::task::JoinSet::new();
        loop {
            while loads.len() < limit {
                let Some(id) = pending.next() else { break };
                let this = self.clone();
                loads.spawn(async move { this.load_locked(&id, None).await });
            }
            let Some(joined) = loads.join_next().await else {
                break;
            };
            let result = joined
                .map_err(|e| Error::internal(format!("model load task failed: {e}")))
                .and_then(|r| r);
            if let Err(e) = result {
                tracing::error!(error = %e, "failed to load");
                failures.push(e);
            }
        }
        for id in ensembles {
            if let Err(e) = self.load_locked(&id, None).await {
                tracing::error!(error = %e, "failed to load");
                failures.push(e);
            }
        }
        Ok(failures)
    }
}
