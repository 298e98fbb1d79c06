//! One inference over HTTP, shared by the KServe infer endpoint and the SageMaker and
//! Vertex AI endpoints. Triton serves all three with the same handler; they differ only in
//! how the length of the JSON before the binary tensor data is announced, whether bodies
//! may be compressed and whether headers are forwarded, so those are the call's
//! parameters and the codec stays in one place.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use axum::extract::Extension;
use axum::http::{header, HeaderMap};
use axum::response::Response;
use bytes::Bytes;
use nereid_core::header_forward::HeaderForward;
use nereid_core::request::{id_for_log, log_refused, Answer};
use nereid_core::trace::RequestTrace;
use nereid_core::{Error, Result, Server};

use crate::compression::{self, Encoding};
use crate::infer::{self, Layout, OutputFormat};
use crate::trace::{self, Arrival};

/// How an endpoint frames an infer body: where the length of its JSON part is announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// KServe's `Inference-Header-Content-Length`; bodies may be gzip or deflate.
    Kserve,
    /// The JSON length follows this prefix in the `Content-Type`, as SageMaker and Vertex
    /// AI send it; bodies are never decompressed nor answers compressed, as in Triton.
    ContentType(&'static str),
}

/// One inference request as an endpoint received it.
pub(crate) struct InferCall<'a> {
    /// The facade that runs it.
    pub server: &'a Arc<Server>,
    /// The model and version the endpoint resolved.
    pub model: &'a str,
    /// `None` for the model's latest ready version.
    pub version: Option<i64>,
    /// The request's headers (framing, trace context, forwarding).
    pub headers: &'a HeaderMap,
    /// When the request arrived, if it was stamped for tracing.
    pub arrival: Option<Extension<Arrival>>,
    /// `--http-max-input-size`.
    pub max_input_size: usize,
    /// How the body is framed.
    pub framing: Framing,
    /// Headers to forward as request parameters (the KServe endpoint only).
    pub header_forward: Option<&'a HeaderForward>,
}

/// Decodes the body and submits the inference, with Triton's order of checks: the
/// decoupled refusal before the body is read, the framing, the body, then the forwarded
/// headers. Returns the inference under way, which encodes the answer when it comes.
/// Errors are the core's; each endpoint chooses their status.
pub(crate) fn infer(call: InferCall<'_>, body: Bytes) -> Result<Running> {
    let InferCall {
        server,
        model,
        version,
        headers,
        arrival,
        max_input_size,
        framing,
        header_forward,
    } = call;
    let trace = trace::sample(server, model, headers, arrival);
    let target = server.infer_target(model, version, "HTTP end point")?;
    let (body, layout) = match framing {
        Framing::Kserve => {
            let body = compression::decode_body(headers, body, max_input_size)?;
            let layout = infer::layout(headers, body.len())?;
            (body, layout)
        }
        Framing::ContentType(prefix) => {
            let layout = content_type_layout(headers, prefix, body.len())?;
            (body, layout)
        }
    };
    let (mut request, format) = match layout {
        Layout::Raw => {
            let spec = server.model_spec(model, version)?;
            infer::decode_raw(&spec, version, body, max_input_size)?
        }
        layout => infer::decode(model, version, layout, body, server.shm(), max_input_size)?,
    };
    if let Some(forward) = header_forward {
        let forwarded = forward.parameters(headers.iter().map(|(n, v)| (n.as_str(), v)))?;
        request.parameters.extend(forwarded);
    }
    request.trace = trace.clone();
    let accepted = match framing {
        Framing::Kserve => compression::accepted(headers),
        Framing::ContentType(_) => None,
    };
    let logged_id = id_for_log(&request.id);
    let answer = server.admit_to(target, request).inspect_err(|e| {
        if let Some(id) = &logged_id {
            log_refused(id, e);
        }
    })?;
    Ok(Running {
        answer,
        reply: Some(Reply {
            format,
            accepted,
            trace,
        }),
    })
}

/// An inference under way: the core's answer, then its encoding for the client. Written
/// by hand so that a request's future holds only this (not the decoder's state and the
/// call's arguments, as an `async fn` would, twice over), small enough for the
/// allocator's small bins.
pub(crate) struct Running {
    answer: Answer,
    /// How to encode the answer; taken when it comes.
    reply: Option<Reply>,
}

/// What encoding an answer needs from its request.
struct Reply {
    format: OutputFormat,
    accepted: Option<Encoding>,
    trace: Option<RequestTrace>,
}

impl Future for Running {
    type Output = Result<Response>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let answer = ready!(this.answer.as_mut().poll(cx));
        let Some(reply) = this.reply.take() else {
            return Poll::Ready(Err(Error::internal(
                "an answered inference was polled again",
            )));
        };
        Poll::Ready(answer.and_then(|response| {
            trace::stamp(reply.trace.as_ref(), "INFER_RESPONSE_COMPLETE");
            let encoded = infer::encode(&response, &reply.format, reply.accepted)?;
            Ok(trace::send(reply.trace, encoded))
        }))
    }
}

/// The body layout from a `Content-Type` of `<prefix><length>` (Triton's
/// `GetInferenceHeaderLength` of its SageMaker and Vertex AI endpoints): any other type
/// means the whole body is JSON, an empty body or a length of 0 a raw binary input. The
/// length is read as C's `atoi` reads it (leading digits, else 0), and the messages are
/// Triton's.
fn content_type_layout(headers: &HeaderMap, prefix: &str, body_len: usize) -> Result<Layout> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let length = match content_type
        .as_deref()
        .and_then(|t| Some((t, t.find(prefix)?)))
    {
        None => body_len as i64,
        Some((content_type, 0)) => {
            let text = &content_type[prefix.len()..];
            let length = atoi(text);
            if length < 0 || length > body_len as i64 {
                return Err(Error::invalid_arg(format!(
                    "inference header size should be in range (0, {body_len}), got: {text}"
                )));
            }
            length
        }
        Some((content_type, _)) => {
            return Err(Error::invalid_arg(format!(
                "expect MIME type for binary data starts with '{prefix}', got: {content_type}"
            )))
        }
    };
    Ok(match usize::try_from(length) {
        Ok(0) | Err(_) => Layout::Raw,
        Ok(n) => Layout::Split(n),
    })
}

/// C's `atoi` on 32 bits: leading whitespace, an optional sign, then digits up to the
/// first other character; 0 when there are none.
fn atoi(text: &str) -> i64 {
    let text = text.trim_start();
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let end = unsigned
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(unsigned.len());
    let magnitude = match &unsigned[..end] {
        "" => 0,
        digits => digits.parse::<i64>().unwrap_or(i64::MAX),
    };
    let value = if text.starts_with('-') {
        -magnitude
    } else {
        magnitude
    };
    value.clamp(i32::MIN.into(), i32::MAX.into())
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    const PREFIX: &str = "application/vnd.sagemaker-triton.binary+json;json-header-size=";

    fn layout_of(content_type: Option<&str>, body_len: usize) -> Result<Layout> {
        let mut headers = HeaderMap::new();
        if let Some(t) = content_type {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_str(t).expect("ASCII"),
            );
        }
        content_type_layout(&headers, PREFIX, body_len)
    }

    #[test]
    fn the_content_type_frames_the_body_as_triton_reads_it() {
        assert_eq!(layout_of(None, 10).expect("json"), Layout::Split(10));
        assert_eq!(
            layout_of(Some("application/json"), 10).expect("json"),
            Layout::Split(10)
        );
        assert_eq!(layout_of(None, 0).expect("empty"), Layout::Raw);
        let with = |n: &str| format!("{PREFIX}{n}");
        assert_eq!(
            layout_of(Some(&with("4")), 10).expect("split"),
            Layout::Split(4)
        );
        assert_eq!(
            layout_of(Some(&with(" 4x")), 10).expect("atoi"),
            Layout::Split(4)
        );
        assert_eq!(
            layout_of(Some(&with("abc")), 10).expect("atoi 0"),
            Layout::Raw
        );
        assert_eq!(
            layout_of(Some(&with("11")), 10)
                .expect_err("too long")
                .message(),
            "inference header size should be in range (0, 10), got: 11"
        );
        assert_eq!(
            layout_of(Some(&with("-1")), 10)
                .expect_err("negative")
                .message(),
            "inference header size should be in range (0, 10), got: -1"
        );
        let shifted = format!("x{}", with("4"));
        assert_eq!(
            layout_of(Some(&shifted), 10)
                .expect_err("not first")
                .message(),
            format!("expect MIME type for binary data starts with '{PREFIX}', got: {shifted}")
        );
    }

    #[test]
    fn atoi_reads_leading_digits_on_32_bits() {
        assert_eq!(atoi("12"), 12);
        assert_eq!(atoi("  -7z"), -7);
        assert_eq!(atoi("+3"), 3);
        assert_eq!(atoi(""), 0);
        assert_eq!(atoi("x1"), 0);
        assert_eq!(atoi("99999999999999"), i64::from(i32::MAX));
    }
}
