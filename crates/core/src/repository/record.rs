//! The model table's entries: each model's versions with their state, and why the model
//! was loaded (explicitly, or as an ensemble's composing model), which decides what an
//! unload takes with it. The manager owns the table; these are plain data and pure
//! functions over it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::instance_update::ServedFrom;
use super::scan::Signature;
use crate::loaded::LoadedModel;

/// A model version's state, as the repository index reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelState {
    /// Being loaded.
    Loading,
    /// Serving.
    Ready,
    /// Not serving (failed or unloaded); see the reason.
    Unavailable,
}

impl ModelState {
    /// Triton's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelState::Loading => "LOADING",
            ModelState::Ready => "READY",
            ModelState::Unavailable => "UNAVAILABLE",
        }
    }
}

/// The reason of a version unloaded through the API (Triton's word).
pub(super) const UNLOADED: &str = "unloaded";

/// One version's entry in the model table.
#[derive(Clone)]
pub(super) struct VersionRecord {
    pub(super) state: ModelState,
    pub(super) reason: String,
    pub(super) model: Option<Arc<LoadedModel>>,
}

/// One model's entry in the model table.
#[derive(Clone, Default)]
pub(super) struct ModelRecord {
    pub(super) versions: BTreeMap<i64, VersionRecord>,
    /// A load error that prevented any version from being tried.
    pub(super) error: Option<String>,
    /// Directory fingerprint at load time (poll mode).
    pub(super) signature: Signature,
    /// How it came to be loaded, and for an ensemble what it uses.
    pub(super) origin: Origin,
    /// What its serving versions were loaded from, for a reload to tell whether it can
    /// change their instances in place (not kept for ensembles).
    pub(super) served_from: Option<ServedFrom>,
}

/// Why a model was loaded and what it depends on: what `unload_dependents` needs.
#[derive(Clone, Default)]
pub(super) struct Origin {
    /// Loaded because someone asked for it (start-up, the load API, polling), not only
    /// as a composing model of an ensemble.
    pub(super) explicit: bool,
    /// An ensemble's composing model names (empty for other models).
    pub(super) composing: Vec<String>,
}

impl ModelRecord {
    /// Whether any version is serving.
    pub(super) fn is_loaded(&self) -> bool {
        self.versions.values().any(|v| v.model.is_some())
    }

    /// Whether this model keeps a strictly ready server from being ready, as Triton's
    /// `InferenceServer::IsReady` decides: a version that is loading or failed to load
    /// does; a version unloaded through the API does not (Triton 2.51 answers 200 after
    /// an explicit unload); a model that failed before any version was tried (its
    /// configuration could not be read) does not either, as it never reaches Triton's
    /// model lifecycle. A model with neither versions nor an error has nothing to serve
    /// and does. Unloading a failed model, or removing it from a polled repository,
    /// takes its record out of the reckoning; Triton 2.51 keeps the failure and stays
    /// unready until a restart (docs/src/differences.md).
    pub(super) fn holds_readiness(&self) -> bool {
        if self.versions.is_empty() {
            return self.error.is_none();
        }
        self.versions
            .values()
            .any(|v| v.state != ModelState::Ready && v.reason != UNLOADED)
    }

    /// Whether the model was unloaded through the API (and not loaded again since).
    pub(super) fn was_unloaded(&self) -> bool {
        self.error.is_none()
            && !self.versions.is_empty()
            && self
                .versions
                .values()
                .all(|v| v.model.is_none() && v.reason == UNLOADED)
    }
}

/// The models that unloading `name` unloads: itself; with `unload_dependents`, the
/// composing models (recursively) that were not loaded explicitly and that no other
/// loaded ensemble uses; and every loaded ensemble that uses any of those.
pub(super) fn unload_set(
    table: &BTreeMap<String, ModelRecord>,
    name: &str,
    unload_dependents: bool,
) -> BTreeSet<String> {
    let mut set = BTreeSet::from([name.to_string()]);
    if unload_dependents {
        add_unneeded_composing(table, name, &mut set);
    }
    loop {
        let users: Vec<String> = table
            .iter()
            .filter(|(n, r)| {
                !set.contains(*n)
                    && r.is_loaded()
                    && r.origin.composing.iter().any(|c| set.contains(c))
            })
            .map(|(n, _)| n.clone())
            .collect();
        if users.is_empty() {
            return set;
        }
        set.extend(users);
    }
}

fn add_unneeded_composing(
    table: &BTreeMap<String, ModelRecord>,
    ensemble: &str,
    set: &mut BTreeSet<String>,
) {
    let Some(record) = table.get(ensemble) else {
        return;
    };
    for model in &record.origin.composing {
        let Some(r) = table.get(model) else {
            continue;
        };
        if set.contains(model) || r.origin.explicit || !r.is_loaded() {
            continue;
        }
        let used_elsewhere = table.iter().any(|(n, other)| {
            !set.contains(n) && other.is_loaded() && other.origin.composing.contains(model)
        });
        if !used_elsewhere {
            set.insert(model.clone());
            add_unneeded_composing(table, model, set);
        }
    }
}
