//! The facade's administrative calls: metadata, configuration, statistics and the model
//! repository extension, each answering the JSON document Triton's HTTP endpoint answers.
//! HTTP sends these documents as they are, the C ABI hands them out as
//! `TRITONSERVER_Message`s, and gRPC uses the typed calls beside them; keeping the JSON
//! here means the two JSON edges cannot drift apart.

use std::path::Path;

use serde::Serialize;
use serde_json::{json, Value};

use super::{Server, TensorMetadata};
use crate::error::Result;
use crate::repository::{IndexEntry, LoadRequest};
use crate::stats::{ModelStatsSnapshot, StatDuration};

impl Server {
    /// Server metadata (`GET /v2`): name, version and the extensions that really work.
    pub fn server_metadata_json(&self) -> Value {
        json!({
            "name": self.identity.name,
            "version": self.identity.version,
            "extensions": self.extensions(),
        })
    }

    /// Model metadata (`GET /v2/models/{m}[/versions/{v}]`).
    pub fn model_metadata_json(&self, name: &str, version: Option<i64>) -> Result<Value> {
        let m = self.model_metadata(name, version)?;
        Ok(json!({
            "name": m.name,
            "versions": m.versions,
            "platform": m.platform,
            "inputs": tensors_json(&m.inputs),
            "outputs": tensors_json(&m.outputs),
        }))
    }

    /// The normalized configuration a ready version was loaded with
    /// (`GET /v2/models/{m}/config`).
    pub fn model_config_json(&self, name: &str, version: Option<i64>) -> Result<Value> {
        Ok(self.model_config(name, version)?.json.clone())
    }

    /// Statistics (`GET /v2/models[/{m}[/versions/{v}]]/stats`): `{"model_stats": [...]}`,
    /// with [`Server::statistics`]'s rules for which versions are listed.
    pub fn statistics_json(&self, name: Option<&str>, version: Option<i64>) -> Result<Value> {
        let stats = self.statistics(name, version)?;
        Ok(json!({"model_stats": stats.iter().map(stats_json).collect::<Vec<_>>()}))
    }

    /// The repository index (`POST /v2/repository/index`), optionally only ready versions.
    /// Async because it lists the repositories on storage.
    pub async fn repository_index_json(&self, ready_only: bool) -> Result<Vec<IndexDocument>> {
        let entries = self.repository_index(ready_only).await?;
        Ok(entries.into_iter().map(IndexDocument::from).collect())
    }

    /// The repository index as typed entries (for gRPC's message).
    pub async fn repository_index(&self, ready_only: bool) -> Result<Vec<IndexEntry>> {
        self.repository.index(ready_only).await
    }

    /// Loads (or reloads) a model, with an optional configuration and file overrides;
    /// fails as Triton does outside explicit model control.
    pub async fn load_model(&self, name: &str, request: LoadRequest) -> Result<()> {
        self.repository.load(name, request).await
    }

    /// Re-scans the repositories and applies what changed (POLL mode; the binary's poll
    /// task and `TRITONSERVER_ServerPollModelRepository`).
    pub async fn poll_repository(&self) -> Result<()> {
        self.repository.poll().await
    }

    /// Unloads a model, and with `unload_dependents` an ensemble's composing models that
    /// nothing else needs.
    pub async fn unload_model(&self, name: &str, unload_dependents: bool) -> Result<()> {
        self.repository.unload(name, unload_dependents).await
    }

    /// Adds a model repository while the server runs, its directories named by `mapping`
    /// (directory name → model name) where given; explicit model control only. Triton's
    /// SageMaker endpoint registers each model archive it loads this way.
    pub async fn register_model_repository(
        &self,
        repository: &Path,
        mapping: &[(String, String)],
    ) -> Result<()> {
        self.repository
            .register_repository(repository, mapping)
            .await
    }

    /// Removes a repository [`Self::register_model_repository`] added; its loaded models
    /// stay loaded.
    pub fn unregister_model_repository(&self, repository: &Path) -> Result<()> {
        self.repository.unregister_repository(repository)
    }
}

fn tensors_json(list: &[TensorMetadata]) -> Vec<Value> {
    list.iter()
        .map(|t| json!({"name": t.name, "datatype": t.datatype.as_str(), "shape": t.shape}))
        .collect()
}

fn duration(d: StatDuration) -> Value {
    json!({"count": d.count, "ns": d.ns})
}

/// Triton's statistics JSON for one model version.
fn stats_json(s: &ModelStatsSnapshot) -> Value {
    let i = &s.inference_stats;
    json!({
        "name": s.name,
        "version": s.version.to_string(),
        "last_inference": s.last_inference,
        "inference_count": s.inference_count,
        "execution_count": s.execution_count,
        "inference_stats": {
            "success": duration(i.success),
            "fail": duration(i.fail),
            "queue": duration(i.queue),
            "compute_input": duration(i.compute_input),
            "compute_infer": duration(i.compute_infer),
            "compute_output": duration(i.compute_output),
            "cache_hit": duration(i.cache_hit),
            "cache_miss": duration(i.cache_miss),
        },
        "response_stats": s.response_stats.iter().map(|(index, r)| (index.clone(), json!({
            "compute_infer": duration(r.compute_infer),
            "compute_output": duration(r.compute_output),
            "success": duration(r.success),
            "fail": duration(r.fail),
            "empty_response": duration(r.empty_response),
            "cancel": duration(r.cancel),
        }))).collect::<serde_json::Map<String, Value>>(),
        "batch_stats": s.batch_stats.iter().map(|b| json!({
            "batch_size": b.batch_size,
            "compute_input": duration(b.compute_input),
            "compute_infer": duration(b.compute_infer),
            "compute_output": duration(b.compute_output),
        })).collect::<Vec<_>>(),
        "memory_usage": [],
    })
}

/// One index entry; version, state and reason only where known.
/// One entry of the repository index document, its fields in Triton's order (`name`,
/// `version`, `state`, `reason`): the in-process API hands its text over as written, and
/// Triton's C API tests compare that text byte for byte.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IndexDocument {
    /// The model's name.
    pub name: String,
    /// The version, for an entry of one version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Its state (`READY`, `UNAVAILABLE`, ...), where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<&'static str>,
    /// Why it is in that state, if anything is to be said.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

impl From<IndexEntry> for IndexDocument {
    fn from(e: IndexEntry) -> Self {
        Self {
            name: e.name,
            version: e.version.map(|v| v.to_string()),
            state: e.state.map(|s| s.as_str()),
            reason: e.reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testing::{self, TestBackend};

    const CONFIG: &str = r#"backend: "identity" max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]"#;

    #[tokio::test]
    async fn documents_are_the_http_endpoints_json() {
        let repo = tempfile::tempdir().expect("temp dir");
        testing::write_model(repo.path(), "ident", CONFIG, &[1]);
        let server = testing::server(repo.path(), &TestBackend::identity()).await;
        let metadata = server.server_metadata_json();
        assert_eq!(metadata["name"], "nereid");
        assert!(metadata["extensions"]
            .as_array()
            .is_some_and(|e| e.contains(&json!("statistics"))));
        assert_eq!(
            server.model_metadata_json("ident", None).expect("ready"),
            json!({"name": "ident", "versions": ["1"], "platform": "identity",
                "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [-1, 2]}],
                "outputs": [{"name": "OUTPUT0", "datatype": "INT32", "shape": [-1, 2]}]})
        );
        let index = server.repository_index_json(true).await.expect("index");
        // Triton's order of fields, which its C API tests compare as text.
        assert_eq!(
            serde_json::to_string(&index).expect("serializes"),
            r#"[{"name":"ident","version":"1","state":"READY"}]"#
        );
        let stats = server.statistics_json(Some("ident"), None).expect("stats");
        assert_eq!(stats["model_stats"][0]["version"], "1");
        assert_eq!(stats["model_stats"][0]["inference_count"], 0);
        let error = server
            .statistics_json(Some("absent"), None)
            .expect_err("unknown model");
        assert_eq!(error.message(), "requested model 'absent' is not available");
        assert_eq!(
            server.model_config_json("ident", None).expect("ready")["max_batch_size"],
            4
        );
    }
}
