//! KServe v2 over HTTP/1.1 with the binary tensor data extension, on bare `hyper`
//! client connections: no pool, no retries, no redirects, so the measured time is the
//! request itself. Each connection is kept alive and carries one request at a time.

use std::sync::Arc;

use anyhow::{bail, Context as _};
use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;

use super::ShmRef;
use super::{InferError, InferRequest, Target};
use crate::metadata::{ModelInfo, TensorMeta};
use crate::stats::{Duration64, ServerStats};

/// The header that tells the server where the JSON part of a binary-extension body ends.
const HEADER_LENGTH: &str = "inference-header-content-length";

/// A request body in the binary tensor format: JSON header, then each input's raw bytes.
#[derive(Clone, Debug)]
pub struct HttpBody {
    /// The whole body.
    pub body: Bytes,
    /// Length of the JSON header, ready to send as `Inference-Header-Content-Length`.
    pub header_length: HeaderValue,
}

#[derive(Serialize)]
struct JsonRequest<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<serde_json::Value>,
    inputs: Vec<JsonInput<'a>>,
    outputs: Vec<JsonOutput<'a>>,
}

#[derive(Serialize)]
struct JsonInput<'a> {
    name: &'a str,
    shape: &'a [i64],
    datatype: &'a str,
    parameters: serde_json::Value,
}

#[derive(Serialize)]
struct JsonOutput<'a> {
    name: &'a str,
    parameters: serde_json::Value,
}

/// The parameters that place a tensor in a registered shared-memory region.
fn shm_parameters(region: &str, place: ShmRef) -> serde_json::Value {
    serde_json::json!({
        "shared_memory_region": region,
        "shared_memory_offset": place.offset,
        "shared_memory_byte_size": place.byte_size,
    })
}

impl HttpBody {
    /// Builds the body of an infer request: every input as binary data, every requested
    /// output asked for as binary data; or, with a shared-memory placement, a JSON-only
    /// body whose inputs and outputs all refer to the region.
    pub fn build(request: &InferRequest) -> Self {
        let shm = request.shm.as_ref();
        let header = JsonRequest {
            parameters: request.sequence.map(|s| {
                serde_json::json!({
                    "sequence_id": s.id,
                    "sequence_start": s.start,
                    "sequence_end": s.end,
                })
            }),
            inputs: request
                .inputs
                .iter()
                .enumerate()
                .map(|(k, i)| JsonInput {
                    name: &i.name,
                    shape: &i.shape,
                    datatype: i.datatype.as_str(),
                    parameters: match shm {
                        Some(p) => shm_parameters(&p.region, p.inputs[k]),
                        None => serde_json::json!({"binary_data_size": i.data.len()}),
                    },
                })
                .collect(),
            outputs: request
                .outputs
                .iter()
                .enumerate()
                .map(|(k, name)| JsonOutput {
                    name,
                    parameters: match shm {
                        Some(p) => shm_parameters(&p.region, p.outputs[k]),
                        None => serde_json::json!({"binary_data": true}),
                    },
                })
                .collect(),
        };
        let json = serde_json::to_vec(&header)
            .expect("serializing plain structs of strings and numbers cannot fail");
        let data_len: usize = if shm.is_some() {
            0
        } else {
            request.inputs.iter().map(|i| i.data.len()).sum()
        };
        let mut body = BytesMut::with_capacity(json.len() + data_len);
        body.put_slice(&json);
        if shm.is_none() {
            for input in &request.inputs {
                body.put_slice(&input.data);
            }
        }
        Self {
            body: body.freeze(),
            header_length: HeaderValue::from(json.len()),
        }
    }
}

/// One HTTP/1.1 keep-alive connection; reconnects on the next request after a failure.
pub struct HttpConn {
    /// host:port, also the `Host` header.
    address: Arc<str>,
    host: HeaderValue,
    infer_uri: Uri,
    /// `None` after a failure, until the next request reconnects.
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl HttpConn {
    /// Opens a connection to `target` (TCP_NODELAY on, as every latency tool wants).
    async fn open(address: Arc<str>, infer_uri: Uri) -> Result<Self, InferError> {
        let host = HeaderValue::from_str(&address)
            .map_err(|e| InferError::Transport(format!("bad address '{address}': {e}")))?;
        let mut conn = Self {
            address,
            host,
            infer_uri,
            sender: None,
        };
        conn.sender = Some(conn.handshake().await?);
        Ok(conn)
    }

    async fn handshake(&self) -> Result<SendRequest<Full<Bytes>>, InferError> {
        let transport = |e: &dyn std::fmt::Display| InferError::Transport(format!("connect: {e}"));
        let stream = TcpStream::connect(&*self.address)
            .await
            .map_err(|e| transport(&e))?;
        stream.set_nodelay(true).map_err(|e| transport(&e))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| transport(&e))?;
        // The connection task ends when the sender is dropped or the peer closes.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }

    /// Sends one request and reads the whole response.
    async fn send(
        &mut self,
        request: Request<Full<Bytes>>,
    ) -> Result<(StatusCode, Bytes), InferError> {
        let mut sender = match self.sender.take() {
            Some(s) if !s.is_closed() => s,
            _ => self.handshake().await?,
        };
        let transport = |e: hyper::Error| InferError::Transport(e.to_string());
        sender.ready().await.map_err(transport)?;
        let response = sender.send_request(request).await.map_err(transport)?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(transport)?
            .to_bytes();
        // Only a connection that got a complete answer goes back into use.
        self.sender = Some(sender);
        Ok((status, body))
    }

    /// A request to `uri` with the `Host` header set.
    fn request(&self, method: Method, uri: Uri) -> hyper::http::request::Builder {
        Request::builder()
            .method(method)
            .uri(uri)
            .header(HOST, self.host.clone())
    }

    /// Sends one infer request; success is HTTP 200.
    pub async fn infer(&mut self, body: &HttpBody) -> Result<(), InferError> {
        let request = self
            .request(Method::POST, self.infer_uri.clone())
            .header(
                CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            )
            .header(CONTENT_LENGTH, HeaderValue::from(body.body.len()))
            .header(HEADER_LENGTH, body.header_length.clone())
            .body(Full::new(body.body.clone()))
            .map_err(|e| InferError::Transport(e.to_string()))?;
        let (status, response) = self.send(request).await?;
        if status == StatusCode::OK {
            Ok(())
        } else {
            Err(InferError::Server(error_message(status, &response)))
        }
    }

    /// GETs `path` and parses the JSON answer; non-200 answers become errors.
    async fn get_json<T: for<'de> Deserialize<'de>>(&mut self, path: &str) -> anyhow::Result<T> {
        let uri: Uri = path.parse().with_context(|| format!("bad path '{path}'"))?;
        let request = self
            .request(Method::GET, uri)
            .body(Full::new(Bytes::new()))
            .context("building a GET request")?;
        let (status, body) = self.send(request).await?;
        if status != StatusCode::OK {
            bail!("GET {path}: {}", error_message(status, &body));
        }
        serde_json::from_slice(&body).with_context(|| format!("GET {path}: unexpected answer"))
    }
}

impl HttpConn {
    /// POSTs `body` as JSON to `path`; non-200 answers become errors.
    async fn post_json(&mut self, path: &str, body: &serde_json::Value) -> anyhow::Result<()> {
        let uri: Uri = path.parse().with_context(|| format!("bad path '{path}'"))?;
        let request = self
            .request(Method::POST, uri)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(Full::new(Bytes::from(body.to_string())))
            .context("building a POST request")?;
        let (status, response) = self.send(request).await?;
        if status != StatusCode::OK {
            bail!("POST {path}: {}", error_message(status, &response));
        }
        Ok(())
    }
}

/// The `{"error": "..."}` message of a failed request, or the status and raw body.
fn error_message(status: StatusCode, body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct ErrorBody {
        error: String,
    }
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => format!("{} ({})", e.error, status.as_u16()),
        Err(_) => format!("HTTP {status}: {}", String::from_utf8_lossy(body)),
    }
}

/// Opens HTTP inference connections.
#[derive(Clone)]
pub struct HttpConnector {
    address: Arc<str>,
    infer_uri: Uri,
}

impl HttpConnector {
    /// A new keep-alive connection.
    pub async fn conn(&self) -> Result<HttpConn, InferError> {
        HttpConn::open(self.address.clone(), self.infer_uri.clone()).await
    }
}

/// The HTTP control client: metadata, config, statistics, and new connections.
pub struct HttpControl {
    conn: HttpConn,
    /// `/v2/models/{m}[/versions/{v}]`.
    model_path: String,
    infer_uri: Uri,
}

impl HttpControl {
    /// Connects; a refused connection is an error naming the address.
    pub async fn connect(target: Target) -> anyhow::Result<Self> {
        let mut model_path = format!("/v2/models/{}", target.model);
        if !target.version.is_empty() {
            model_path.push_str(&format!("/versions/{}", target.version));
        }
        let infer_uri: Uri = format!("{model_path}/infer")
            .parse()
            .with_context(|| format!("model name '{}' does not fit in a URL path", target.model))?;
        let address: Arc<str> = target.address.into();
        let conn = HttpConn::open(address.clone(), infer_uri.clone())
            .await
            .map_err(|e| match e {
                InferError::Transport(cause) | InferError::Server(cause) => {
                    anyhow::anyhow!("cannot reach the HTTP server at {address}: {cause}")
                }
            })?;
        Ok(Self {
            conn,
            model_path,
            infer_uri,
        })
    }

    /// The factory of inference connections to the same server and model.
    pub fn connector(&self) -> HttpConnector {
        HttpConnector {
            address: self.conn.address.clone(),
            infer_uri: self.infer_uri.clone(),
        }
    }

    /// `POST /v2/systemsharedmemory/region/{name}/register`.
    pub async fn register_system_shm(
        &mut self,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> anyhow::Result<()> {
        let body = serde_json::json!({"key": key, "offset": offset, "byte_size": byte_size});
        self.conn
            .post_json(
                &format!("/v2/systemsharedmemory/region/{name}/register"),
                &body,
            )
            .await
    }

    /// `POST /v2/systemsharedmemory/region/{name}/unregister`.
    pub async fn unregister_system_shm(&mut self, name: &str) -> anyhow::Result<()> {
        self.conn
            .post_json(
                &format!("/v2/systemsharedmemory/region/{name}/unregister"),
                &serde_json::json!({}),
            )
            .await
    }

    /// `GET /v2/models/{m}` and `GET /v2/models/{m}/config`.
    pub async fn model_info(&mut self) -> anyhow::Result<ModelInfo> {
        #[derive(Deserialize)]
        struct Metadata {
            #[serde(default)]
            inputs: Vec<Tensor>,
            #[serde(default)]
            outputs: Vec<Tensor>,
        }
        #[derive(Deserialize)]
        struct Tensor {
            name: String,
            datatype: String,
            shape: Vec<i64>,
        }
        #[derive(Deserialize)]
        struct Config {
            #[serde(default)]
            max_batch_size: i64,
        }
        let path = self.model_path.clone();
        let metadata: Metadata = self.conn.get_json(&path).await?;
        let config: Config = self.conn.get_json(&format!("{path}/config")).await?;
        let tensors = |v: Vec<Tensor>| {
            v.into_iter()
                .map(|t| TensorMeta {
                    name: t.name,
                    datatype: t.datatype,
                    shape: t.shape,
                })
                .collect()
        };
        Ok(ModelInfo {
            inputs: tensors(metadata.inputs),
            outputs: tensors(metadata.outputs),
            max_batch_size: u32::try_from(config.max_batch_size.max(0)).unwrap_or(u32::MAX),
        })
    }

    /// `GET /v2/models/{m}/stats`, summed over the versions it lists.
    pub async fn stats(&mut self) -> anyhow::Result<ServerStats> {
        #[derive(Deserialize)]
        struct Stats {
            #[serde(default)]
            model_stats: Vec<ModelStats>,
        }
        #[derive(Deserialize, Default)]
        #[serde(default)]
        struct ModelStats {
            inference_count: u64,
            execution_count: u64,
            inference_stats: InferStats,
        }
        #[derive(Deserialize, Default)]
        #[serde(default)]
        struct InferStats {
            success: Dur,
            queue: Dur,
            compute_input: Dur,
            compute_infer: Dur,
            compute_output: Dur,
        }
        #[derive(Deserialize, Default, Clone, Copy)]
        #[serde(default)]
        struct Dur {
            count: u64,
            ns: u64,
        }
        let d = |d: Dur| Duration64 {
            count: d.count,
            ns: d.ns,
        };
        let path = format!("{}/stats", self.model_path);
        let stats: Stats = self.conn.get_json(&path).await?;
        let mut total = ServerStats::default();
        for m in stats.model_stats {
            let s = &m.inference_stats;
            total.add(&ServerStats {
                inference_count: m.inference_count,
                execution_count: m.execution_count,
                success: d(s.success),
                queue: d(s.queue),
                compute_input: d(s.compute_input),
                compute_infer: d(s.compute_infer),
                compute_output: d(s.compute_output),
            });
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::InputTensor;
    use crate::client::SequenceStep;
    use crate::data::DataType;

    #[test]
    fn body_is_json_header_then_raw_inputs() {
        let request = InferRequest {
            inputs: vec![
                InputTensor {
                    name: "INPUT0".into(),
                    datatype: DataType::Fp32,
                    shape: vec![1, 2],
                    data: Bytes::from_static(&[1, 2, 3, 4, 5, 6, 7, 8]),
                },
                InputTensor {
                    name: "INPUT1".into(),
                    datatype: DataType::Uint8,
                    shape: vec![1, 3],
                    data: Bytes::from_static(&[9, 10, 11]),
                },
            ],
            outputs: vec!["OUTPUT0".into()],
            shm: None,
            sequence: Some(SequenceStep {
                id: 7,
                start: true,
                end: false,
            }),
        };
        let body = HttpBody::build(&request);
        let json_len: usize = body
            .header_length
            .to_str()
            .expect("ascii digits")
            .parse()
            .expect("a number");
        let (json, raw) = body.body.split_at(json_len);
        assert_eq!(raw, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
        let header: serde_json::Value = serde_json::from_slice(json).expect("valid JSON");
        assert_eq!(
            header,
            serde_json::json!({
                "parameters": {"sequence_id": 7, "sequence_start": true, "sequence_end": false},
                "inputs": [
                    {"name": "INPUT0", "shape": [1, 2], "datatype": "FP32",
                     "parameters": {"binary_data_size": 8}},
                    {"name": "INPUT1", "shape": [1, 3], "datatype": "UINT8",
                     "parameters": {"binary_data_size": 3}},
                ],
                "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": true}}],
            })
        );
    }

    #[test]
    fn shm_body_is_json_only_with_region_parameters() {
        let request = InferRequest {
            inputs: vec![InputTensor {
                name: "INPUT0".into(),
                datatype: DataType::Fp32,
                shape: vec![1, 2],
                data: Bytes::from_static(&[1, 2, 3, 4, 5, 6, 7, 8]),
            }],
            outputs: vec!["OUTPUT0".into()],
            shm: Some(crate::client::ShmPlacement {
                region: "r0".into(),
                inputs: vec![ShmRef {
                    offset: 0,
                    byte_size: 8,
                }],
                outputs: vec![ShmRef {
                    offset: 64,
                    byte_size: 32,
                }],
            }),
            sequence: None,
        };
        let body = HttpBody::build(&request);
        assert_eq!(
            body.header_length.to_str().expect("ascii digits"),
            body.body.len().to_string(),
            "no binary data follows the JSON"
        );
        let header: serde_json::Value = serde_json::from_slice(&body.body).expect("valid JSON");
        assert_eq!(
            header,
            serde_json::json!({
                "inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "FP32",
                    "parameters": {"shared_memory_region": "r0", "shared_memory_offset": 0,
                                   "shared_memory_byte_size": 8}}],
                "outputs": [{"name": "OUTPUT0",
                    "parameters": {"shared_memory_region": "r0", "shared_memory_offset": 64,
                                   "shared_memory_byte_size": 32}}],
            })
        );
    }

    #[test]
    fn error_message_prefers_the_json_error() {
        let m = error_message(StatusCode::BAD_REQUEST, br#"{"error":"bad input"}"#);
        assert_eq!(m, "bad input (400)");
        let m = error_message(StatusCode::BAD_GATEWAY, b"oops");
        assert!(m.contains("502") && m.contains("oops"));
    }
}
