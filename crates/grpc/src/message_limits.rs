//! How large a request message may be. Triton's gRPC takes messages up to `INT32_MAX`
//! bytes (`MAX_GRPC_MESSAGE_SIZE`), and its clients send tensors of a gigabyte and more
//! uncompressed (L0_large_payload sends 1.9 GB), so that is the limit for a message as it
//! arrives (`--grpc-max-input-size`). A compressed message is different: Triton inflates
//! it to the same 2 GiB, so one 1 MB gzip request took 2.1 GB of memory. tonic has one
//! limit per service for both the message as sent and what it inflates to, so the
//! inference service is built twice ([`ByEncoding`]): calls that declare a compression
//! go to the copy whose limit is `--grpc-max-decompressed-size` (64 MiB, Triton's HTTP
//! default), the rest to the copy with the input limit.

use std::convert::Infallible;
use std::task::{Context, Poll};

use tonic::codegen::http::Request;
use tonic::server::NamedService;
use tower::Service;

/// Triton's bound on a gRPC message (`MAX_GRPC_MESSAGE_SIZE`, `INT32_MAX`): the default
/// `--grpc-max-input-size`.
pub const DEFAULT_MAX_INPUT_SIZE: usize = 2_147_483_647;

/// The default `--grpc-max-decompressed-size`: the HTTP frontend's default
/// `--http-max-input-size` (64 MiB, Triton's `HTTP_DEFAULT_MAX_INPUT_SIZE`), which bounds
/// an HTTP body's inflation the same way.
pub const DEFAULT_MAX_DECOMPRESSED_SIZE: usize = 64 * 1024 * 1024;

/// The largest message a call may send: `max_input` as it arrives, at most
/// `max_decompressed` once inflated when the call declares a compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageLimits {
    /// `--grpc-max-input-size`.
    pub max_input: usize,
    /// `--grpc-max-decompressed-size`.
    pub max_decompressed: usize,
}

impl Default for MessageLimits {
    /// Triton's message bound, and the 64 MiB inflation bound.
    fn default() -> Self {
        Self {
            max_input: DEFAULT_MAX_INPUT_SIZE,
            max_decompressed: DEFAULT_MAX_DECOMPRESSED_SIZE,
        }
    }
}

impl MessageLimits {
    /// The limit for a service that takes compressed messages: both bounds apply.
    pub fn compressed(&self) -> usize {
        self.max_input.min(self.max_decompressed)
    }
}

/// One gRPC service as two copies that differ only in their message limit: a call whose
/// `grpc-encoding` names a compression goes to `compressed`, every other to `plain`.
#[derive(Debug, Clone)]
pub struct ByEncoding<S> {
    /// The copy for uncompressed calls (the input limit).
    pub plain: S,
    /// The copy for compressed calls (the inflation limit too).
    pub compressed: S,
}

/// Whether the call's messages may come compressed (`grpc-encoding` other than
/// `identity`; gRPC's compressed-flag is only allowed with such a header).
fn declares_compression<B>(request: &Request<B>) -> bool {
    request
        .headers()
        .get("grpc-encoding")
        .is_some_and(|encoding| encoding.as_bytes() != b"identity")
}

impl<S: NamedService> NamedService for ByEncoding<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<Request<B>> for ByEncoding<S>
where
    S: Service<Request<B>, Error = Infallible>,
{
    type Response = S::Response;
    type Error = Infallible;
    type Future = S::Future;

    /// Ready when both copies are; tonic's generated services always are, so neither
    /// holds a reservation the other call would not use.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        match (self.plain.poll_ready(cx), self.compressed.poll_ready(cx)) {
            (Poll::Ready(Ok(())), Poll::Ready(Ok(()))) => Poll::Ready(Ok(())),
            _ => Poll::Pending,
        }
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if declares_compression(&request) {
            self.compressed.call(request)
        } else {
            self.plain.call(request)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressed_calls_are_those_naming_an_encoding() {
        let call = |encoding: Option<&str>| {
            let mut builder = Request::builder();
            if let Some(encoding) = encoding {
                builder = builder.header("grpc-encoding", encoding);
            }
            declares_compression(&builder.body(()).expect("request"))
        };
        assert!(!call(None));
        assert!(!call(Some("identity")));
        assert!(call(Some("gzip")));
        assert!(call(Some("deflate")));
    }

    #[test]
    fn the_compressed_limit_is_the_smaller() {
        let limits = MessageLimits::default();
        assert_eq!(limits.compressed(), DEFAULT_MAX_DECOMPRESSED_SIZE);
        let small = MessageLimits {
            max_input: 1000,
            ..limits
        };
        assert_eq!(small.compressed(), 1000);
    }
}
