//! The repository index (`POST /v2/repository/index`): every model directory across the
//! repositories, with the states of the versions the table knows.

use super::manager::{IndexEntry, ModelRepository};
use super::record::ModelState;
use crate::error::Result;

impl ModelRepository {
    /// The repository index: every model directory, with its versions' states.
    pub async fn index(&self, ready_only: bool) -> Result<Vec<IndexEntry>> {
        let on_disk = self.scan().await?;
        let table = self.table.read();
        let mut names: Vec<&String> = on_disk.keys().chain(table.keys()).collect();
        names.sort();
        names.dedup();
        let mut entries = Vec::new();
        for id in names {
            let name = &self.model_name(id).to_string();
            let Some(record) = table.get(id) else {
                if !ready_only {
                    entries.push(IndexEntry {
                        name: name.clone(),
                        version: None,
                        state: None,
                        reason: String::new(),
                    });
                }
                continue;
            };
            if let Some(error) = &record.error {
                if !ready_only {
                    entries.push(IndexEntry {
                        name: name.clone(),
                        version: None,
                        state: Some(ModelState::Unavailable),
                        reason: error.clone(),
                    });
                }
            }
            for (&version, v) in &record.versions {
                if ready_only && v.state != ModelState::Ready {
                    continue;
                }
                entries.push(IndexEntry {
                    name: name.clone(),
                    version: Some(version),
                    state: Some(v.state),
                    reason: v.reason.clone(),
                });
            }
        }
        Ok(entries)
    }
}
