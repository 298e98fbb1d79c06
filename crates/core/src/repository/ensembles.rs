//! Loading ensembles into the repository: first the composing models that are not ready
//! (refusing circular dependencies between ensembles), then the ensemble, checked against
//! them; the errors are Triton's. This extends the manager (it calls the manager's
//! loading and recording); the unload rules are in [`super::record`]. With namespacing,
//! each step's model is resolved to a table key first (`ids.rs`), and the
//! ensemble's plan runs on those keys.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nereid_proto::inference::model_config::SchedulingChoice;

use super::agents::run_load_agents;
use super::ids::step_key;
use super::loader::load_ensemble;
use super::manager::ModelRepository;
use super::record::Origin;
use super::scan::{read_config, ModelDirs};
use crate::classification::Labels;
use crate::config::{
    check_supported, ensembling, is_ensemble, normalize_and_validate, ModelConfig,
};
use crate::ensemble::graph::{composing_models, Plan};
use crate::ensemble::{Ensemble, StepModel, StepModels};
use crate::error::{Error, Result};

impl StepModels for ModelRepository {
    fn step_model(&self, name: &str, version: Option<i64>) -> Result<Arc<dyn StepModel>> {
        Ok(self.get(name, version)?)
    }
}

impl ModelRepository {
    /// Loads the ensemble `name` (a table key) from `config` (read from `dir` or given by
    /// the load API); the caller holds the admin lock.
    pub(super) async fn load_ensemble(
        self: &Arc<Self>,
        name: &str,
        dir: &Path,
        mut config: ModelConfig,
        explicit: bool,
    ) -> Result<()> {
        let signature = self.dir_signature(name, dir).await.unwrap_or_default();
        let steps = match self.step_ids(name, &config).await {
            Ok(steps) => steps,
            Err(e) => {
                let origin = Origin {
                    explicit,
                    composing: composing_models(&config),
                };
                return self.install(name, signature, origin, Err(e));
            }
        };
        let origin = Origin {
            explicit,
            composing: steps.values().cloned().collect(),
        };
        // Configuration and agent errors are reported as for any model (Triton's poll
        // stage).
        let checked = self.run_agents(name, dir, &config).await;
        let checked = checked
            .and_then(|()| check_supported(&config))
            .and_then(|()| {
                normalize_and_validate(
                    &mut config,
                    self.model_name(name),
                    self.options.settings.normalize,
                )
            });
        let plan = checked.and_then(|()| Plan::new(&config));
        let mut plan = match plan {
            Ok(plan) => plan,
            Err(e) => return self.install(name, signature, origin, Err(e)),
        };
        self.bind_steps(name, &steps, &mut config, &mut plan);
        let models: Arc<dyn StepModels> = self.clone();
        let ensemble = match self
            .load_composing(name, &config, &steps)
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
        // Triton fills this in for every ensemble (decoupled when a step is); clients
        // read it from the configuration, and the spec streams its answers.
        config
            .model_transaction_policy
            .get_or_insert_with(Default::default)
            .decoupled = ensemble.decoupled();
        let step_labels = self.step_labels(&config, &steps);
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

    /// Each step model name of ensemble `name` → the table key it runs on (the name
    /// itself without namespacing).
    async fn step_ids(&self, name: &str, config: &ModelConfig) -> Result<BTreeMap<String, String>> {
        let on_disk = if self.namespacing() {
            self.scan().await?
        } else {
            ModelDirs::new()
        };
        let table = self.table.read();
        Ok(composing_models(config)
            .into_iter()
            .map(|step| {
                let id = self.step_id(&on_disk, &table, name, &step);
                (step, id)
            })
            .collect())
    }

    /// The ensemble's repository agents, off the request threads.
    async fn run_agents(&self, name: &str, dir: &Path, config: &ModelConfig) -> Result<()> {
        if config.model_repository_agents.is_none() {
            return Ok(());
        }
        let (name, config, dir) = (name.to_string(), config.clone(), dir.to_path_buf());
        let agents = self.options.settings.flags.repoagent_directory.clone();
        self.read_off_thread(
            &format!("ensemble:{name}"),
            "running the repository agents",
            move || run_load_agents(&name, &config, &dir, &agents),
        )
        .await?
    }

    /// With namespacing, points the plan's steps at the keys in `steps` and records each
    /// step's namespace in the configuration the ensemble publishes, as Triton does.
    fn bind_steps(
        &self,
        name: &str,
        steps: &BTreeMap<String, String>,
        config: &mut ModelConfig,
        plan: &mut Plan,
    ) {
        if !self.namespacing() {
            return;
        }
        for step in &mut plan.steps {
            if let Some(id) = steps.get(&step.model) {
                step.model = id.clone();
            }
        }
        if let Some(SchedulingChoice::EnsembleScheduling(scheduling)) =
            &mut config.scheduling_choice
        {
            for step in &mut scheduling.step {
                let id = steps.get(&step.model_name).map_or(name, String::as_str);
                if let Some(namespace) = self.namespace_of(id) {
                    step.model_namespace = namespace.to_string();
                }
            }
        }
    }

    /// The labels an ensemble's outputs take from the steps that produce them (Triton's
    /// model lifecycle does this when an ensemble loads): the composing model's labels of
    /// the step output mapped to the ensemble output. Composing models are loaded by now.
    fn step_labels(&self, config: &ModelConfig, steps: &BTreeMap<String, String>) -> Labels {
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
                    let id = steps.get(&step.model_name).unwrap_or(&step.model_name);
                    if let Ok(model) = self.get(id, version) {
                        if let Some(list) = model.spec().labels.of(step_output) {
                            labels.inherit(&output.name, list.clone());
                        }
                    }
                }
            }
        }
        labels
    }

    /// Loads the composing models of ensemble `name` that are not ready (`steps`: step
    /// model name → table key).
    async fn load_composing(
        self: &Arc<Self>,
        name: &str,
        config: &ModelConfig,
        steps: &BTreeMap<String, String>,
    ) -> Result<()> {
        let on_disk = self.scan().await?;
        let walk = Walk {
            dirs: on_disk.clone(),
            roots: self.roots(),
            namespacing: self.namespacing(),
            config_name: self.options.settings.flags.model_config_name.clone(),
        };
        let (root, walked) = (name.to_string(), config.clone());
        let cycle = self
            .read_off_thread(
                &format!("ensemble:{name}"),
                "reading the configurations of the ensembles",
                move || walk.cycle_through(&root, &walked),
            )
            .await?;
        if let Some(cycle) = cycle {
            return Err(Error::invalid_arg(cycle));
        }
        let missing: Vec<&str> = steps
            .iter()
            .filter(|(_, id)| {
                !on_disk.get(*id).is_some_and(|d| d.is_ok()) && self.get(id, None).is_err()
            })
            .map(|(step, _)| step.as_str())
            .collect();
        if !missing.is_empty() {
            return Err(Error::invalid_arg(format!(
                "ensemble {name} contains models that are not available or ambiguous: {}",
                missing.join(", ")
            )));
        }
        for model in steps.values() {
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

/// What the cycle check reads: the model directories and how step names resolve.
struct Walk {
    dirs: ModelDirs,
    roots: Vec<PathBuf>,
    namespacing: bool,
    config_name: Option<String>,
}

impl Walk {
    /// Triton's error when the ensembles on disk lead from `root` (a key) back to itself.
    /// Reads their configurations: call it off the request threads.
    fn cycle_through(&self, root: &str, config: &ModelConfig) -> Option<String> {
        let mut path = vec![root.to_string()];
        self.walk(root, root, config, &mut path)
    }

    /// The key step model `step` of ensemble `ensemble` names, among the directories.
    fn step(&self, ensemble: &str, step: &str) -> String {
        let known = |id: &str| self.dirs.get(id).is_some_and(|d| d.is_ok());
        step_key(&self.roots, self.namespacing, known, ensemble, step)
    }

    fn walk(
        &self,
        root: &str,
        ensemble: &str,
        config: &ModelConfig,
        path: &mut Vec<String>,
    ) -> Option<String> {
        for step in composing_models(config) {
            let model = self.step(ensemble, &step);
            if model == root {
                let last = path.last().map_or(root, String::as_str);
                return Some(format!(
                    "circular dependency between ensembles: {root} -> ... -> {last} -> {root}"
                ));
            }
            // A cycle that does not pass through `root` is reported when its own
            // ensembles load.
            if path.contains(&model) {
                continue;
            }
            let Some(inner) = self
                .dirs
                .get(&model)
                .and_then(|dir| dir.as_ref().ok())
                .and_then(|dir| read_config(dir, self.config_name.as_deref()).ok().flatten())
                .filter(is_ensemble)
            else {
                continue;
            };
            path.push(model.clone());
            let found = self.walk(root, &model, &inner, path);
            path.pop();
            if found.is_some() {
                return found;
            }
        }
        None
    }
}
