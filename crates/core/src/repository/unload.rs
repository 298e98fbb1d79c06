//! The repository extension's unload, with the ensembles that depend on the model.

use std::sync::Arc;

use super::manager::{stop_in_background, ModelRepository};
use super::record::{unload_set, ModelState, UNLOADED};
use crate::error::Result;

impl ModelRepository {
    /// The repository extension's unload. Only in explicit mode, as in Triton. Ensembles
    /// that use the model are unloaded with it (they cannot run without it); with
    /// `unload_dependents`, an ensemble's composing models go too unless they were loaded
    /// explicitly or another loaded ensemble still uses them.
    pub async fn unload(self: &Arc<Self>, name: &str, unload_dependents: bool) -> Result<()> {
        self.require_explicit()?;
        let _admin = self.admin.lock().await;
        let removed = {
            let mut table = self.table.write();
            // As in Triton, unloading a model that is not loaded succeeds.
            let ids = self.ids_named(table.keys(), name);
            let mut names = std::collections::BTreeSet::new();
            for id in &ids {
                names.extend(unload_set(&table, id, unload_dependents));
            }
            let mut removed = Vec::new();
            for n in &names {
                let Some(record) = table.get_mut(n) else {
                    continue;
                };
                for v in record.versions.values_mut() {
                    if let Some(model) = v.model.take() {
                        removed.push(model);
                    }
                    v.state = ModelState::Unavailable;
                    v.reason = UNLOADED.into();
                }
            }
            for n in &names {
                tracing::info!(model = %n, "successfully unloaded");
            }
            removed
        };
        stop_in_background(removed);
        Ok(())
    }
}
