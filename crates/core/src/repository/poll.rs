//! Poll control mode: each pass unloads models whose directory went away (with their
//! ensembles) and reloads those whose directory signature changed.

use std::sync::Arc;

use super::manager::{stop_in_background, ModelRepository};
use super::record::{unload_set, ModelRecord};
use super::scan::ModelDirs;
use crate::error::Result;

impl ModelRepository {
    /// Poll mode: loads new models, reloads changed ones, unloads removed ones.
    pub async fn poll(self: &Arc<Self>) -> Result<()> {
        let on_disk = self.scan().await?;
        let known: Vec<String> = self.table.read().keys().cloned().collect();
        for name in &known {
            if !on_disk.contains_key(name) {
                // Ensembles using a removed model go with it.
                let removed: Vec<(String, ModelRecord)> = {
                    let mut table = self.table.write();
                    unload_set(&table, name, false)
                        .into_iter()
                        .filter_map(|n| table.remove(&n).map(|r| (n, r)))
                        .collect()
                };
                for (name, record) in removed {
                    stop_in_background(
                        record
                            .versions
                            .into_values()
                            .filter_map(|v| v.model)
                            .collect(),
                    );
                    tracing::info!(model = %name, "removed from the repository: unloaded");
                }
            }
        }
        let mut changed_ids = Vec::new();
        for (name, dir) in &on_disk {
            let Ok(dir) = dir else { continue };
            let now = match self.dir_signature(name, dir).await {
                Ok(now) => now,
                Err(e) => {
                    tracing::error!(model = %name, error = %e, "cannot poll the model directory");
                    continue;
                }
            };
            let changed = self
                .table
                .read()
                .get(name)
                .is_none_or(|r| r.signature != now);
            if changed {
                changed_ids.push(name.clone());
            }
        }
        for ensemble in self.relinked_ensembles(&on_disk) {
            if !changed_ids.contains(&ensemble) {
                changed_ids.push(ensemble);
            }
        }
        let _admin = self.admin.lock().await;
        self.load_many(changed_ids, on_disk).await.map(drop)
    }

    /// The loaded ensembles a step of which would now run on another model that exists:
    /// with namespacing, a step prefers the model of the ensemble's own namespace, so
    /// when one appears there the ensemble loads again and is re-linked, as Triton's
    /// dependency graph re-links it (core `model_repository_manager.cc`
    /// `DependencyGraph::AddNodes`/`ConnectDependencyGraph`). A step that only became
    /// ambiguous keeps the model it runs on.
    fn relinked_ensembles(&self, on_disk: &ModelDirs) -> Vec<String> {
        if !self.namespacing() {
            return Vec::new();
        }
        let table = self.table.read();
        let exists =
            |id: &str| on_disk.get(id).is_some_and(|d| d.is_ok()) || table.contains_key(id);
        table
            .iter()
            .filter(|(_, record)| record.is_loaded())
            .filter(|(ensemble, record)| {
                record.origin.composing.iter().any(|used| {
                    let now = self.step_id(on_disk, &table, ensemble, self.model_name(used));
                    now != *used && exists(&now)
                })
            })
            .map(|(ensemble, _)| ensemble.clone())
            .collect()
    }
}
