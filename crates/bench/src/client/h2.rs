//! Bare HTTP/2 connections for gRPC inference, without tonic's `Channel`.
//!
//! tonic's `Channel` puts a `tower::Buffer` in front of the connection, which moves every
//! call through a separate task, and its unary calls send a streaming body, for which
//! `hyper` spawns one more task per request to pipe it. A latency tool should add neither.
//! So unary `ModelInfer` is sent here as one pre-encoded gRPC frame in a fixed-size body
//! ([`UnaryConn`]), and streams run the generated tonic client over [`H2Channel`], which
//! hands requests straight to `hyper`. Neither reconnects by itself; their owners reopen
//! them after a failure.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Body as HttpBody;
use hyper::client::conn::http2::SendRequest;
use hyper::header::{HeaderMap, HeaderValue, CONTENT_TYPE, TE};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tonic::codegen::Service;

use super::InferError;

/// Opens a prior-knowledge HTTP/2 connection over plain TCP, as gRPC without TLS does,
/// with TCP_NODELAY on.
async fn handshake<B>(address: &str) -> Result<SendRequest<B>, String>
where
    B: HttpBody + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(address)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .set_nodelay(true)
        .map_err(|e| format!("connect: {e}"))?;
    let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    // Ends when every sender clone is dropped or the peer closes.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// One HTTP/2 connection, usable as the transport of a generated tonic client.
#[derive(Clone)]
pub struct H2Channel {
    sender: SendRequest<tonic::body::Body>,
}

impl H2Channel {
    /// Connects to `address` (host:port).
    pub async fn connect(address: &str) -> Result<Self, String> {
        Ok(Self {
            sender: handshake(address).await?,
        })
    }

    /// Whether the connection is gone (the peer closed it or it failed).
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }
}

impl Service<Request<tonic::body::Body>> for H2Channel {
    type Response = Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.sender.poll_ready(cx)
    }

    fn call(&mut self, request: Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.sender.send_request(request))
    }
}

/// Frames an encoded protobuf message for gRPC: uncompressed flag, 4-byte big-endian
/// length, message.
pub fn grpc_frame(message: &[u8]) -> Bytes {
    let mut frame = Vec::with_capacity(5 + message.len());
    frame.push(0);
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(message);
    Bytes::from(frame)
}

/// A connection for unary gRPC calls with pre-encoded request frames.
pub struct UnaryConn {
    address: String,
    /// The full URI of the method, `http://host:port/package.Service/Method`.
    uri: Uri,
    /// `None` after a failure, until the next call reconnects.
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl UnaryConn {
    /// Connects to `address` for calls to `method` (`/package.Service/Method`).
    pub async fn connect(address: &str, method: &str) -> Result<Self, InferError> {
        let uri: Uri = format!("http://{address}{method}")
            .parse()
            .map_err(|e| InferError::Transport(format!("bad address '{address}': {e}")))?;
        let sender = handshake(address).await.map_err(InferError::Transport)?;
        Ok(Self {
            address: address.to_string(),
            uri,
            sender: Some(sender),
        })
    }

    /// Sends one request frame and waits for the whole response. Success is HTTP 200 with
    /// `grpc-status: 0`; the response message itself is not decoded.
    pub async fn call(&mut self, frame: &Bytes) -> Result<(), InferError> {
        let mut sender = match self.sender.take() {
            Some(s) if !s.is_closed() => s,
            _ => handshake(&self.address)
                .await
                .map_err(InferError::Transport)?,
        };
        let request = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/grpc"))
            .header(TE, HeaderValue::from_static("trailers"))
            .body(Full::new(frame.clone()))
            .map_err(|e| InferError::Transport(e.to_string()))?;
        let transport = |e: hyper::Error| InferError::Transport(e.to_string());
        sender.ready().await.map_err(transport)?;
        let response = sender.send_request(request).await.map_err(transport)?;
        let (parts, body) = response.into_parts();
        if parts.status != StatusCode::OK {
            // Not a gRPC answer at all (a proxy, or not a gRPC port); keep the connection.
            self.sender = Some(sender);
            return Err(InferError::Server(format!("HTTP status {}", parts.status)));
        }
        // A trailers-only response (the usual form of an error) has the status in the headers.
        if let Some(err) = grpc_error(&parts.headers) {
            self.sender = Some(sender);
            return Err(err);
        }
        let collected = body.collect().await.map_err(transport)?;
        self.sender = Some(sender);
        match collected.trailers() {
            Some(trailers) => grpc_error(trailers).map_or(Ok(()), Err),
            None => Err(InferError::Server(
                "response without grpc-status".to_string(),
            )),
        }
    }
}

/// The error a `grpc-status` other than 0 stands for, with its `grpc-message`.
fn grpc_error(headers: &HeaderMap) -> Option<InferError> {
    let status = headers.get("grpc-status")?;
    if status.as_bytes() == b"0" {
        return None;
    }
    let code = String::from_utf8_lossy(status.as_bytes()).into_owned();
    let message = headers
        .get("grpc-message")
        .map(|m| percent_decode(m.as_bytes()))
        .unwrap_or_default();
    Some(InferError::Server(format!(
        "{}: {message}",
        tonic::Code::from_bytes(code.as_bytes()).description()
    )))
}

/// Decodes the percent-encoding gRPC uses for `grpc-message`.
fn percent_decode(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (raw[i], raw.get(i + 1).copied(), raw.get(i + 2).copied()) {
            (b'%', Some(h), Some(l)) if hex(h).is_some() && hex(l).is_some() => {
                let value = hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0);
                out.push(value as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_has_flag_and_big_endian_length() {
        let frame = grpc_frame(&[7, 8, 9]);
        assert_eq!(frame.as_ref(), &[0, 0, 0, 0, 3, 7, 8, 9]);
    }

    #[test]
    fn grpc_status_and_message_are_decoded() {
        let mut headers = HeaderMap::new();
        assert!(grpc_error(&headers).is_none());
        headers.insert("grpc-status", HeaderValue::from_static("0"));
        assert!(grpc_error(&headers).is_none());
        headers.insert("grpc-status", HeaderValue::from_static("3"));
        headers.insert(
            "grpc-message",
            HeaderValue::from_static("unexpected%20shape%3A %5B1%5D"),
        );
        let err = grpc_error(&headers).expect("an error").to_string();
        assert!(err.contains("unexpected shape: [1]"), "{err}");
        assert!(err.contains("invalid argument"), "{err}");
    }
}
