//! A mock KServe v2 HTTP server with three models:
//! - `batched`: FP32 input `IN` of shape [-1, 4], max_batch_size 8; checks every infer
//!   body against its JSON header and reports 10 µs of queue time per request;
//! - `failing`: same shape, answers every infer with 400;
//! - `ragged`: input shape [-1, -1], for the shape-override check.
//!
//! It also keeps a system shared-memory registry: registering checks that the object
//! exists under `/dev/shm` and is large enough, and infer requests whose tensors refer to a
//! region are checked against it instead of the binary body.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

#[derive(Default)]
struct Counters {
    /// (requests, inferences) served, updated together so that a statistics read never
    /// sees one without the other (the bench's average batch size must stay exact).
    served: Mutex<(u64, u64)>,
    bad_bodies: AtomicU64,
    /// Registered regions: name → byte size.
    regions: Mutex<HashMap<String, u64>>,
    registrations: AtomicU64,
    unregistrations: AtomicU64,
    shm_requests: AtomicU64,
}

/// A running mock; the server task lives as long as the test's runtime.
pub struct MockServer {
    /// host:port it listens on.
    pub address: String,
    counters: Arc<Counters>,
}

impl MockServer {
    /// Binds 127.0.0.1:0 and serves in the background.
    pub async fn start() -> Self {
        let counters = Arc::new(Counters::default());
        let app = Router::new()
            .route("/v2/models/{model}", get(metadata))
            .route("/v2/models/{model}/config", get(config))
            .route("/v2/models/{model}/stats", get(stats))
            .route("/v2/models/{model}/infer", post(infer))
            .route(
                "/v2/systemsharedmemory/region/{name}/register",
                post(register),
            )
            .route(
                "/v2/systemsharedmemory/region/{name}/unregister",
                post(unregister),
            )
            .with_state(counters.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a free port");
        let address = listener.local_addr().expect("bound address").to_string();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { address, counters }
    }

    /// Infer bodies whose layout did not match their header.
    pub fn bad_bodies(&self) -> u64 {
        self.counters.bad_bodies.load(Ordering::Relaxed)
    }

    /// (registrations, unregistrations, infer requests served from shared memory).
    pub fn shm_counts(&self) -> (u64, u64, u64) {
        let c = &self.counters;
        (
            c.registrations.load(Ordering::Relaxed),
            c.unregistrations.load(Ordering::Relaxed),
            c.shm_requests.load(Ordering::Relaxed),
        )
    }

    /// Regions still registered.
    pub fn registered_regions(&self) -> usize {
        self.counters.regions.lock().expect("not poisoned").len()
    }
}

async fn register(
    State(c): State<Arc<Counters>>,
    Path(name): Path<String>,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let key = body["key"].as_str().unwrap_or_default();
    let byte_size = body["byte_size"].as_u64().unwrap_or(0);
    let size = std::fs::metadata(format!("/dev/shm/{}", key.trim_start_matches('/')))
        .map(|m| m.len())
        .unwrap_or(0);
    if body["offset"] != 0 || byte_size == 0 || size < byte_size {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": format!("bad region {key} ({size} bytes)")})),
        );
    }
    c.registrations.fetch_add(1, Ordering::Relaxed);
    c.regions
        .lock()
        .expect("not poisoned")
        .insert(name, byte_size);
    (StatusCode::OK, Json(json!({})))
}

async fn unregister(State(c): State<Arc<Counters>>, Path(name): Path<String>) -> StatusCode {
    if c.regions
        .lock()
        .expect("not poisoned")
        .remove(&name)
        .is_some()
    {
        c.unregistrations.fetch_add(1, Ordering::Relaxed);
    }
    StatusCode::OK
}

/// Checks a request whose tensors all live in shared memory: the input of shape [b, 4]
/// takes b * 16 bytes of a registered region, the output has room in one, and no binary
/// data follows the JSON.
fn shm_body_matches(c: &Counters, json_len: usize, body_len: usize, header: &Value) -> Option<u64> {
    let regions = c.regions.lock().ok()?;
    let fits = |params: &Value| {
        let region = params["shared_memory_region"].as_str()?;
        let offset = params["shared_memory_offset"].as_u64().unwrap_or(0);
        let size = params["shared_memory_byte_size"].as_u64()?;
        (offset + size <= *regions.get(region)?).then_some(size)
    };
    let input = &header["inputs"][0];
    let batch = input["shape"][0].as_u64()?;
    let ok = fits(&input["parameters"])? == batch * 16
        && fits(&header["outputs"][0]["parameters"])? >= batch * 16
        && json_len == body_len;
    ok.then_some(batch)
}

async fn metadata(Path(model): Path<String>) -> Json<Value> {
    let shape = if model == "ragged" {
        json!([-1, -1])
    } else {
        json!([-1, 4])
    };
    Json(json!({
        "name": model,
        "versions": ["1"],
        "platform": "mock",
        "inputs": [{"name": "IN", "datatype": "FP32", "shape": shape}],
        "outputs": [{"name": "OUT", "datatype": "FP32", "shape": shape}],
    }))
}

async fn config(Path(model): Path<String>) -> Json<Value> {
    Json(json!({"name": model, "max_batch_size": 8}))
}

async fn stats(State(c): State<Arc<Counters>>) -> Json<Value> {
    let (requests, inferences) = *c.served.lock().expect("not poisoned");
    let d = |per_request_ns: u64| json!({"count": requests, "ns": requests * per_request_ns});
    Json(json!({"model_stats": [{
        "name": "batched",
        "version": "1",
        "inference_count": inferences,
        "execution_count": requests,
        "inference_stats": {
            "success": d(50_000),
            "fail": {"count": 0, "ns": 0},
            "queue": d(10_000),
            "compute_input": d(1_000),
            "compute_infer": d(30_000),
            "compute_output": d(2_000),
        },
    }]}))
}

/// Checks the body against the header: JSON of the stated length, one FP32 input of
/// shape [b, 4] whose `binary_data_size` equals the remaining bytes.
fn body_matches(c: &Counters, headers: &HeaderMap, body: &[u8]) -> Option<u64> {
    let json_len: usize = headers
        .get("inference-header-content-length")?
        .to_str()
        .ok()?
        .parse()
        .ok()?;
    let header: Value = serde_json::from_slice(body.get(..json_len)?).ok()?;
    let input = &header["inputs"][0];
    if input["parameters"].get("shared_memory_region").is_some() {
        let batch = shm_body_matches(c, json_len, body.len(), &header)?;
        c.shm_requests.fetch_add(1, Ordering::Relaxed);
        return Some(batch);
    }
    let batch = input["shape"][0].as_u64()?;
    let size = input["parameters"]["binary_data_size"].as_u64()?;
    let binary_output = header["outputs"][0]["parameters"]["binary_data"].as_bool()?;
    let ok = input["shape"][1] == 4
        && size == batch * 16
        && body.len() - json_len == size as usize
        && binary_output;
    ok.then_some(batch)
}

async fn infer(
    State(c): State<Arc<Counters>>,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, Json<Value>) {
    if model == "failing" {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "this model always fails"})),
        );
    }
    match body_matches(&c, &headers, &body) {
        Some(batch) => {
            let mut served = c.served.lock().expect("not poisoned");
            served.0 += 1;
            served.1 += batch;
            drop(served);
            (
                StatusCode::OK,
                Json(json!({"model_name": model, "outputs": []})),
            )
        }
        None => {
            c.bad_bodies.fetch_add(1, Ordering::Relaxed);
            (StatusCode::BAD_REQUEST, Json(json!({"error": "bad body"})))
        }
    }
}
