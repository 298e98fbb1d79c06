//! Loading ensembles into the repository: first the composing models that are not ready
//! (refusing circular dependencies between ensembles), then the ensemble, checked against
//! them; the errors are Triton's. This extends the manager (it calls the manager's
//! loading and recording); the unload rules are in [`super::record`].

use std::path::Path;
use std::sync::Arc;

use super::loader::load_ensemble;
use super::manager::ModelRepository;
use super::record::Origin;
use super::scan::{read_config, ModelDirs};
use crate::classification::Labels;
use crate::config::{ensembling, is_ensemble, normalize_and_validate, ModelConfig};
use crate::ensemble::graph::{composing_models, Plan};
use crate::ensemble::{Ensemble, StepModel, StepModels};
use crate::error::{Error, Result};

impl StepModels for ModelRepository {
    fn step_model(&self, name: &str, version: Option<i64>) -> Result<Arc<dyn StepModel>> {
        Ok(self.get(name, version)?)
    }
}

impl ModelRepository {
    /// Loads the ensemble `name` from `config` (read from `dir` or given by the load API);
    /// the caller holds the admin lock.
    pub(super) async fn load_ensemble(
        self: &Arc<Self>,
        name: &str,
        dir: &Path,
        mut config: ModelConfig,
        explicit: bool,
    ) -> Result<()> {
        let signature = self.dir_signature(name, dir).await.unwrap_or_default();
        let origin = Origin {
            explicit,
            composing: composing_models(&config),
        };
        // Configuration errors are reported as for any model (Triton's poll stage).
        let plan = normalize_and_validate(&mut config, name, self.options.settings.normalize)
            .and_then(|()| Plan::new(&config));
        let plan = match plan {
            Ok(plan) => plan,
            Err(e) => return self.install(name, signature, origin, Err(e)),
        };
        let models: Arc<dyn StepModels> = self.clone();
        let ensemble = match self
            .load_composing(name, &config)
            .await
            .and_then(|()| Ensemble::new(&config, plan, Arc::downgrade(&models)))
        {
            Ok(ensemble) => ensemble,
            Err(e) => {
                // Recorded like any failure; answered with Triton's dependency wording.
                let message = e.message().to_string();
                let _ = self.install(name, signature, origin, Err(e));
                return Err(Error::invalid_arg(format!(
                    "load failed for model '{name}': {message}"
                )));
            }
        };
        let step_labels = self.step_labels(&config);
        let (settings, dir) = (self.options.settings.clone(), dir.to_path_buf());
        let outcome = self
            .load_off_thread(name, move || {
                let outcome = load_ensemble(&settings, &config, &dir, &ensemble, &step_labels);
                ((), outcome)
            })
            .await
            .and_then(|((), outcome)| outcome);
        self.install(name, signature, origin, outcome)
    }

    /// The labels an ensemble's outputs take from the steps that produce them (Triton's
    /// model lifecycle does this when an ensemble loads): the composing model's labels of
    /// the step output mapped to the ensemble output. Composing models are loaded by now.
    fn step_labels(&self, config: &ModelConfig) -> Labels {
        let mut labels = Labels::default();
        let Some(scheduling) = ensembling(config) else {
            return labels;
        };
        for output in &config.output {
            for step in &scheduling.step {
                for (step_output, tensor) in &step.output_map {
                    if *tensor != output.name {
                        continue;
                    }
                    let version = (step.model_version >= 0).then_some(step.model_version);
                    if let Ok(model) = self.get(&step.model_name, version) {
                        if let Some(list) = model.spec().labels.of(step_output) {
                            labels.inherit(&output.name, list.clone());
                        }
                    }
                }
            }
        }
        labels
    }

    /// Loads the composing models of ensemble `name` that are not ready.
    async fn load_composing(self: &Arc<Self>, name: &str, config: &ModelConfig) -> Result<()> {
        let on_disk = self.scan().await?;
        let (dirs, root, walked) = (on_disk.clone(), name.to_string(), config.clone());
        let cycle = self
            .read_off_thread(
                &format!("ensemble:{name}"),
                "reading the configurations of the ensembles",
                move || cycle_through(&dirs, &root, &walked),
            )
            .await?;
        if let Some(cycle) = cycle {
            return Err(Error::invalid_arg(cycle));
        }
        let composing = composing_models(config);
        let missing: Vec<&str> = composing
            .iter()
            .filter(|m| !on_disk.get(*m).is_some_and(|d| d.is_ok()) && self.get(m, None).is_err())
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(Error::invalid_arg(format!(
                "ensemble {name} contains models that are not available or ambiguous: {}",
                missing.join(", ")
            )));
        }
        for model in &composing {
            if self.get(model, None).is_ok() {
                continue;
            }
            if let Err(e) = self.load_any(model, None, false).await {
                let prefix = format!("load failed for model '{model}': ");
                let reason = e.message().strip_prefix(&prefix).unwrap_or(e.message());
                return Err(Error::invalid_arg(format!(
                    "ensemble '{name}' depends on '{model}' which has no loaded version. Model '{model}' loading failed with error: {reason}"
                )));
            }
        }
        Ok(())
    }
}

/// Triton's error when the ensembles on disk (`dirs`) lead from `root` back to itself.
/// Reads their configurations: call it off the request threads.
fn cycle_through(dirs: &ModelDirs, root: &str, config: &ModelConfig) -> Option<String> {
    let mut path = vec![root.to_string()];
    walk_for_cycle(dirs, root, config, &mut path)
}

fn walk_for_cycle(
    dirs: &ModelDirs,
    root: &str,
    config: &ModelConfig,
    path: &mut Vec<String>,
) -> Option<String> {
    for model in composing_models(config) {
        if model == root {
            let last = path.last().map_or(root, String::as_str);
            return Some(format!(
                "circular dependency between ensembles: {root} -> ... -> {last} -> {root}"
            ));
        }
        // A cycle that does not pass through `root` is reported when its own ensembles load.
        if path.contains(&model) {
            continue;
        }
        let Some(inner) = dirs
            .get(&model)
            .and_then(|dir| dir.as_ref().ok())
            .and_then(|dir| read_config(dir).ok().flatten())
            .filter(is_ensemble)
        else {
            continue;
        };
        path.push(model);
        let found = walk_for_cycle(dirs, root, &inner, path);
        path.pop();
        if found.is_some() {
            return found;
        }
    }
    None
}
