//! The JSON documents the server's `TRITONSERVER_Message`s hold: the same documents the
//! HTTP endpoints answer (server and model metadata, statistics, repository index).
//!
//! These read the core facade's structured answers; once the facade answers JSON itself
//! (`Server::*_json`) they become one call each.

use nereid_core::server::TensorMetadata;
use nereid_core::stats::{ModelStatsSnapshot, StatDuration};
use nereid_core::{Result, Server};
use serde_json::{json, Value};

/// Server metadata: name, version and extensions.
pub fn server_metadata(server: &Server) -> Value {
    let id = server.identity();
    json!({
        "name": id.name,
        "version": id.version,
        "extensions": nereid_core::server::EXTENSIONS,
    })
}

/// Model metadata of one ready version (the highest when `version` is `None`).
pub fn model_metadata(server: &Server, name: &str, version: Option<i64>) -> Result<Value> {
    let m = server.model_metadata(name, version)?;
    let tensors = |list: &[TensorMetadata]| -> Vec<Value> {
        list.iter()
            .map(|t| json!({"name": t.name, "datatype": t.datatype.as_str(), "shape": t.shape}))
            .collect()
    };
    Ok(json!({
        "name": m.name,
        "versions": m.versions,
        "platform": m.platform,
        "inputs": tensors(&m.inputs),
        "outputs": tensors(&m.outputs),
    }))
}

/// Statistics of one model (or of all when `name` is `None`).
pub fn statistics(server: &Server, name: Option<&str>, version: Option<i64>) -> Result<Value> {
    let stats = server.statistics(name, version)?;
    Ok(json!({"model_stats": stats.iter().map(model_stats).collect::<Vec<_>>()}))
}

fn duration(d: StatDuration) -> Value {
    json!({"count": d.count, "ns": d.ns})
}

fn model_stats(s: &ModelStatsSnapshot) -> Value {
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
        "response_stats": {},
        "batch_stats": s.batch_stats.iter().map(|b| json!({
            "batch_size": b.batch_size,
            "compute_input": duration(b.compute_input),
            "compute_infer": duration(b.compute_infer),
            "compute_output": duration(b.compute_output),
        })).collect::<Vec<_>>(),
        "memory_usage": [],
    })
}

/// The repository index (only ready versions with `ready_only`).
pub async fn repository_index(server: &Server, ready_only: bool) -> Result<Value> {
    let entries = server.repository().index(ready_only).await?;
    Ok(Value::Array(
        entries
            .into_iter()
            .map(|e| {
                let mut v = json!({"name": e.name});
                if let Some(version) = e.version {
                    v["version"] = json!(version.to_string());
                }
                if let Some(state) = e.state {
                    v["state"] = json!(state.as_str());
                }
                if !e.reason.is_empty() {
                    v["reason"] = json!(e.reason);
                }
                v
            })
            .collect(),
    ))
}
