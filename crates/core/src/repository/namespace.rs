//! `--model-namespacing`: each repository is a namespace, so the same model name may live
//! in several repositories. The model table is then keyed by Triton's model identifier,
//! `<repository>::<name>` (how Triton prints it in logs and messages); without
//! namespacing the key is the name itself, so nothing changes for the default setup.
//!
//! A request names a model without a namespace: it is served when exactly one
//! namespace holds the name, and fails with Triton's ambiguity error when several do.
//! An ensemble's step prefers the model of the ensemble's own namespace, else the only
//! namespace that has it (Triton's rule). Loading or unloading a name acts on every
//! namespace that holds it, as Triton's load API does.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::ids::{qualified, split_id, step_key};
use super::manager::{not_polled, ModelRepository, Override};
use super::record::ModelRecord;
use super::scan::{duplicate_model, ModelDirs};
use crate::error::{Error, Result};

/// Triton's error for a name that several namespaces hold.
fn ambiguous(name: &str, count: usize) -> Error {
    Error::invalid_arg(format!(
        "There are {count} identifiers of model '{name}' in global map, model namespace must be provided to resolve ambiguity."
    ))
}

impl ModelRepository {
    /// Whether repositories are namespaces.
    pub(super) fn namespacing(&self) -> bool {
        self.options.settings.flags.namespacing
    }

    /// The model name of table key `id` (the key itself without namespacing).
    pub(super) fn model_name<'a>(&self, id: &'a str) -> &'a str {
        split_id(&self.roots(), self.namespacing(), id).map_or(id, |(_, name)| name)
    }

    /// The namespace of table key `id`, when namespacing is on.
    pub(super) fn namespace_of<'a>(&self, id: &'a str) -> Option<&'a str> {
        split_id(&self.roots(), self.namespacing(), id).map(|(namespace, _)| namespace)
    }

    /// The table key a request for `name` means, in `table` (read by the caller): the
    /// name itself without namespacing or when it is a key; else the one namespace that
    /// holds it. Models unloaded through the API do not count, as Triton forgets them.
    pub(super) fn resolve<'a>(
        &self,
        table: &BTreeMap<String, ModelRecord>,
        name: &'a str,
    ) -> Result<Cow<'a, str>> {
        if !self.namespacing() || table.contains_key(name) {
            return Ok(Cow::Borrowed(name));
        }
        let (mut live, mut unloaded) = (Vec::new(), Vec::new());
        for root in &self.roots() {
            let id = qualified(root, name);
            match table.get(&id) {
                Some(record) if record.was_unloaded() => unloaded.push(id),
                Some(_) => live.push(id),
                None => {}
            }
        }
        match (live.len(), unloaded.len()) {
            (1, _) => Ok(Cow::Owned(live.remove(0))),
            (0, 1) => Ok(Cow::Owned(unloaded.remove(0))),
            (0, _) => Ok(Cow::Borrowed(name)),
            (count, _) => Err(ambiguous(name, count)),
        }
    }

    /// The keys among `ids` that name model `name` (any namespace).
    pub(super) fn ids_named<'a>(
        &self,
        ids: impl IntoIterator<Item = &'a String>,
        name: &str,
    ) -> Vec<String> {
        ids.into_iter()
            .filter(|id| *id == name || self.model_name(id) == name)
            .cloned()
            .collect()
    }

    /// The key step model `step` of ensemble `ensemble` (a key) runs on, among the
    /// models on disk and in the table (see [`step_key`]).
    pub(super) fn step_id(
        &self,
        on_disk: &ModelDirs,
        table: &BTreeMap<String, ModelRecord>,
        ensemble: &str,
        step: &str,
    ) -> String {
        let known = |id: &str| on_disk.get(id).is_some_and(|d| d.is_ok()) || table.contains_key(id);
        step_key(&self.roots(), self.namespacing(), known, ensemble, step)
    }

    /// A user's load of `name` (the caller does not hold the admin lock): every namespace
    /// holding the name loads it, as in Triton; the first failure is the answer. A name
    /// no repository holds goes on to the ordinary load, which reports it.
    pub(super) async fn load_named(
        self: &std::sync::Arc<Self>,
        name: &str,
        over: Option<Override>,
    ) -> Result<()> {
        if !self.namespacing() {
            // A load through the API reports a name several repositories hold as Triton
            // does: the generic poll failure, the conflict in the log.
            return self.load_unlocked(name, over).await.map_err(|e| {
                if e == duplicate_model(name) {
                    tracing::error!(
                        "failed to poll model '{name}': not unique across all model repositories"
                    );
                    not_polled(name)
                } else {
                    e
                }
            });
        }
        let ids = self.ids_named(self.scan().await?.keys(), name);
        if ids.is_empty() {
            return self.load_unlocked(name, over).await;
        }
        let mut first_error = None;
        for id in ids {
            if let Err(e) = self.load_unlocked(&id, over.clone()).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The ready models a request for `name` means (statistics of all its versions);
    /// Triton's "not available" when no namespace or several hold it.
    pub fn ready_models_named(
        &self,
        name: &str,
    ) -> Result<Vec<std::sync::Arc<crate::loaded::LoadedModel>>> {
        let table = self.table.read();
        let not_available =
            || Error::invalid_arg(format!("requested model '{name}' is not available"));
        let key = self.resolve(&table, name).map_err(|_| not_available())?;
        let models: Vec<_> = table
            .get(key.as_ref())
            .map(|r| {
                r.versions
                    .values()
                    .filter_map(|v| v.model.clone())
                    .collect()
            })
            .unwrap_or_default();
        if models.is_empty() {
            return Err(not_available());
        }
        Ok(models)
    }
}
