//! Model repositories registered while the server runs (Triton's
//! `TRITONSERVER_ServerRegisterModelRepository`, which its SageMaker endpoint uses to add
//! each model archive it loads). A registered repository is searched like a
//! `--model-repository` one, after them; a mapping names one of its model directories
//! differently, so that the directory of a SageMaker archive becomes the model SageMaker
//! asked for, whatever the directory and its configuration call it. Only in explicit
//! model control, with Triton's messages.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::ids::qualified;
use super::manager::{model_key, ControlMode, ModelRepository};
use super::scan::read_config;
use crate::config::ModelConfig;
use crate::error::{Error, ErrorKind, Result};

impl ModelRepository {
    /// The repositories searched now: `--model-repository` ones, then registered ones.
    pub(super) fn roots(&self) -> Vec<PathBuf> {
        self.registered.snapshot().roots(&self.options.roots)
    }

    /// Registers `repository`, its directories mapped by `mapping` (directory name →
    /// model name). Fails outside explicit model control, for a path that is not a
    /// directory, for a repository already known, and for a model name already mapped
    /// (the last two as `AlreadyExists`, which SageMaker answers 409).
    pub async fn register_repository(
        &self,
        repository: &Path,
        mapping: &[(String, String)],
    ) -> Result<()> {
        let shown = repository.display().to_string();
        let mut names: BTreeMap<&str, &str> = BTreeMap::new();
        for (dir, name) in mapping {
            if names.insert(name, dir).is_some() {
                return Err(Error::invalid_arg(format!(
                    "failed to register '{shown}', there is a conflicting mapping for '{name}'"
                )));
            }
        }
        if self.control_mode() != ControlMode::Explicit {
            return Err(Error::unsupported(
                "repository registration is not allowed if model control mode is not EXPLICIT",
            ));
        }
        let path = repository.to_path_buf();
        let is_dir = self
            .read_off_thread("repository", "reading a model repository", move || {
                path.is_dir()
            })
            .await?;
        if !is_dir {
            return Err(Error::invalid_arg(format!(
                "failed to register '{shown}', repository not found"
            )));
        }
        let mut state = self.registered.0.write();
        if state
            .roots(&self.options.roots)
            .iter()
            .any(|r| r == repository)
        {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("model repository '{shown}' has already been registered"),
            ));
        }
        if let Some(name) = names.keys().find(|n| state.mappings.contains_key(**n)) {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("failed to register '{name}', there is a conflicting mapping for '{name}'"),
            ));
        }
        // A withdrawn `--model-repository` one comes back in its place.
        let before = state.withdrawn.len();
        state.withdrawn.retain(|r| r != repository);
        if state.withdrawn.len() == before {
            state.repositories.push(repository.to_path_buf());
        }
        for (name, dir) in names {
            state.mappings.insert(
                name.to_string(),
                (repository.to_path_buf(), dir.to_string()),
            );
        }
        drop(state);
        tracing::info!("Model repository registered: {shown}");
        Ok(())
    }

    /// Unregisters a repository, one registered with [`Self::register_repository`] or a
    /// `--model-repository` one (as Triton allows), and its mappings; its models stay
    /// loaded until unloaded, and no others load from it until it is registered again.
    pub fn unregister_repository(&self, repository: &Path) -> Result<()> {
        if self.control_mode() != ControlMode::Explicit {
            return Err(Error::unsupported(
                "repository unregistration is not allowed if model control mode is not EXPLICIT",
            ));
        }
        let mut state = self.registered.0.write();
        let before = state.repositories.len();
        state.repositories.retain(|r| r != repository);
        let startup = self.options.roots.iter().any(|r| r == repository);
        if state.repositories.len() == before
            && startup
            && !state.withdrawn.iter().any(|r| r == repository)
        {
            state.withdrawn.push(repository.to_path_buf());
        } else if state.repositories.len() == before {
            return Err(Error::invalid_arg(format!(
                "failed to unregister '{}', repository not found",
                repository.display()
            )));
        }
        let mapped: Vec<String> = state
            .mappings
            .iter()
            .filter(|(_, (r, _))| r == repository)
            .map(|(name, _)| name.clone())
            .collect();
        state.mappings.retain(|_, (r, _)| r != repository);
        drop(state);
        self.forget_unloaded(repository, &mapped);
        tracing::info!("Model repository unregistered: {}", repository.display());
        Ok(())
    }

    /// Drops the records of the repository's models that no longer run, as Triton
    /// forgets a repository once unregistered (its index no longer lists them, and they
    /// no longer count against strict readiness): with namespacing every model of its
    /// namespace, otherwise its mapped names and the models loaded from its directories
    /// (an ensemble's composing models). Models still loaded keep running and stay.
    fn forget_unloaded(&self, repository: &Path, mapped: &[String]) {
        let namespace = qualified(repository, "");
        let namespacing = self.namespacing();
        self.table.write().retain(|id, record| {
            let ours = if namespacing {
                id.starts_with(&namespace)
            } else {
                mapped.iter().any(|name| name == id)
                    || record
                        .signature
                        .iter()
                        .any(|(path, _, _)| path.starts_with(repository))
            };
            !ours || record.versions.values().any(|v| v.model.is_some())
        });
    }

    /// For a model loaded under a mapped name, its configuration named after the mapping
    /// (Triton renames it, where a model's directory otherwise fixes its name); `None`
    /// for any other model, or when the configuration cannot be read (the load then
    /// reports it).
    pub(super) async fn mapped_config(&self, name: &str, dir: &Path) -> Option<ModelConfig> {
        let model = self.model_name(name).to_string();
        if !self.registered.snapshot().is_mapped(&model) {
            return None;
        }
        let dir = dir.to_path_buf();
        let config_name = self.options.settings.flags.model_config_name.clone();
        let read = self
            .read_off_thread(
                &model_key(name),
                &format!("reading the configuration of model '{name}'"),
                move || read_config(&dir, config_name.as_deref()),
            )
            .await;
        let mut config = read.ok()?.ok()??;
        config.name = model;
        Some(config)
    }
}

#[cfg(test)]
#[path = "registered_tests.rs"]
mod tests;
