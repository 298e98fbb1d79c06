//! `--grpc-infer-response-compression-level`: which algorithm compresses the responses of
//! `ModelInfer` and `ModelStreamInfer` (Triton sets the level on those two calls only).
//!
//! A gRPC core level names no algorithm: per call, `grpc_compression_algorithm_for_level`
//! ranks the algorithms the client accepts (its `grpc-accept-encoding`) from least to most
//! compression, gzip then deflate, and takes the first for `low`, the middle one for
//! `medium` and the last for `high`; with none accepted the response goes uncompressed.
//! tonic chooses among its enabled encodings by the client's order instead, so
//! [`LevelLayer`] narrows each inference call's `grpc-accept-encoding` to gRPC's pick
//! before tonic reads it (and removes it from the other calls).
//!
//! What differs from Triton: nothing in the choice, since a level only picks the
//! algorithm in gRPC core too. How hard that algorithm works is not the level's either:
//! tonic runs gzip and deflate at flate2's level 6 with no setting for it, gRPC core at
//! zlib's default level (also 6).

use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http::{HeaderValue, Request};

/// gRPC core's compression levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompressionLevel {
    /// Responses go uncompressed (Triton's default).
    #[default]
    None,
    /// The least compressing algorithm the client accepts.
    Low,
    /// The middle one.
    Medium,
    /// The most compressing one.
    High,
}

const ACCEPT_ENCODING: &str = "grpc-accept-encoding";
/// The calls Triton compresses.
const INFER_PATHS: [&str; 2] = [
    "/inference.GRPCInferenceService/ModelInfer",
    "/inference.GRPCInferenceService/ModelStreamInfer",
];

/// An algorithm gRPC core ranks, least compressing first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Algorithm {
    Gzip,
    Deflate,
}

impl Algorithm {
    const RANKED: [Algorithm; 2] = [Algorithm::Gzip, Algorithm::Deflate];

    fn name(self) -> &'static str {
        match self {
            Algorithm::Gzip => "gzip",
            Algorithm::Deflate => "deflate",
        }
    }
}

/// gRPC core's choice for `level` among the encodings the client accepts (the values
/// of its `grpc-accept-encoding` headers, comma-separated lists).
fn choose<'a>(
    level: CompressionLevel,
    accepted: impl Iterator<Item = &'a [u8]>,
) -> Option<Algorithm> {
    let mut have = [false; Algorithm::RANKED.len()];
    for value in accepted {
        for token in value.split(|b| *b == b',') {
            let token = token.trim_ascii();
            for (i, algorithm) in Algorithm::RANKED.iter().enumerate() {
                have[i] |= token.eq_ignore_ascii_case(algorithm.name().as_bytes());
            }
        }
    }
    let mut candidates = Algorithm::RANKED
        .iter()
        .zip(have)
        .filter_map(|(algorithm, accepted)| accepted.then_some(*algorithm));
    let count = candidates.clone().count();
    match level {
        CompressionLevel::None => None,
        CompressionLevel::Low => candidates.next(),
        CompressionLevel::Medium => candidates.nth(count / 2),
        CompressionLevel::High => candidates.next_back(),
    }
}

/// Layer for [`Level`]; only added with a level other than `none`.
#[derive(Debug, Clone, Copy)]
pub struct LevelLayer(pub CompressionLevel);

impl<S> tower::Layer<S> for LevelLayer {
    type Service = Level<S>;

    fn layer(&self, inner: S) -> Level<S> {
        Level {
            inner,
            level: self.0,
        }
    }
}

/// Leaves in each inference call's `grpc-accept-encoding` only the encoding gRPC core
/// would choose at the level, and takes the header off every other call, so tonic
/// (with gzip and deflate enabled) compresses exactly as Triton does.
#[derive(Debug, Clone)]
pub struct Level<S> {
    inner: S,
    level: CompressionLevel,
}

impl<S> tower::Service<Request<Body>> for Level<S>
where
    S: tower::Service<Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        let infer = INFER_PATHS.contains(&request.uri().path());
        let chosen = infer
            .then(|| {
                let accepted = request.headers().get_all(ACCEPT_ENCODING).iter();
                choose(self.level, accepted.map(HeaderValue::as_bytes))
            })
            .flatten();
        let headers = request.headers_mut();
        headers.remove(ACCEPT_ENCODING);
        if let Some(algorithm) = chosen {
            headers.insert(ACCEPT_ENCODING, HeaderValue::from_static(algorithm.name()));
        }
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(level: CompressionLevel, header: &str) -> Option<&'static str> {
        choose(level, std::iter::once(header.as_bytes())).map(Algorithm::name)
    }

    #[test]
    fn levels_pick_as_grpc_core_among_what_the_client_accepts() {
        // What Python's and C++'s gRPC clients send.
        let both = "identity,deflate,gzip";
        assert_eq!(pick(CompressionLevel::None, both), None);
        assert_eq!(pick(CompressionLevel::Low, both), Some("gzip"));
        assert_eq!(pick(CompressionLevel::Medium, both), Some("deflate"));
        assert_eq!(pick(CompressionLevel::High, both), Some("deflate"));
        for level in [
            CompressionLevel::Low,
            CompressionLevel::Medium,
            CompressionLevel::High,
        ] {
            assert_eq!(pick(level, "identity, gzip"), Some("gzip"));
            assert_eq!(pick(level, "DEFLATE"), Some("deflate"));
            assert_eq!(pick(level, "identity"), None);
            assert_eq!(pick(level, ""), None);
        }
    }

    #[test]
    fn accepted_encodings_may_span_header_values() {
        let values = ["identity", "gzip", "deflate"];
        let chosen = choose(CompressionLevel::Low, values.iter().map(|v| v.as_bytes()));
        assert_eq!(chosen, Some(Algorithm::Gzip));
    }
}
