//! `--grpc-restricted-protocol`: a tower layer that answers a call to a restricted API
//! group with Triton's UNAVAILABLE unless the call carries the group's metadata key with
//! its value, before the call's message is read. Each RPC belongs to the group Triton's
//! `grpc_server.cc` gives it.

use std::sync::Arc;
use std::task::{Context, Poll};

use nereid_core::restricted::{ApiGroup, Restrictions};
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tonic::Status;

/// The prefix Triton puts before a `--grpc-restricted-protocol` key to form the metadata
/// key clients must send (`kRestrictedProtocolHeaderTemplate`).
pub const RESTRICTED_HEADER_PREFIX: &str = "triton-grpc-protocol-";

/// The group of the RPC at `path` (`/package.Service/Method`); `None` for paths no
/// service answers (tonic then answers UNIMPLEMENTED, as gRPC does).
pub fn group_of(path: &str) -> Option<ApiGroup> {
    if path == "/grpc.health.v1.Health/Check" {
        return Some(ApiGroup::Health);
    }
    let method = path.strip_prefix("/inference.GRPCInferenceService/")?;
    Some(match method {
        "ServerLive" | "ServerReady" | "ModelReady" => ApiGroup::Health,
        "ServerMetadata" | "ModelMetadata" => ApiGroup::Metadata,
        "ModelInfer" | "ModelStreamInfer" => ApiGroup::Inference,
        "ModelConfig" => ApiGroup::ModelConfig,
        "ModelStatistics" => ApiGroup::Statistics,
        "RepositoryIndex" | "RepositoryModelLoad" | "RepositoryModelUnload" => {
            ApiGroup::ModelRepository
        }
        "SystemSharedMemoryStatus"
        | "SystemSharedMemoryRegister"
        | "SystemSharedMemoryUnregister"
        | "CudaSharedMemoryStatus"
        | "CudaSharedMemoryRegister"
        | "CudaSharedMemoryUnregister" => ApiGroup::SharedMemory,
        "TraceSetting" => ApiGroup::Trace,
        "LogSettings" => ApiGroup::Logging,
        _ => return None,
    })
}

/// Triton's refusal of a call to a restricted group, or `None` when `request` may pass.
fn refusal<B>(restrictions: &Restrictions, request: &Request<B>) -> Option<Status> {
    let restriction = restrictions.get(group_of(request.uri().path())?)?;
    let value = request.headers().get(restriction.header.as_str());
    if restriction.admits(value.map(|v| v.as_bytes())) {
        return None;
    }
    Some(Status::unavailable(format!(
        "This protocol is restricted, expecting header '{}'",
        restriction.header
    )))
}

/// Layer for [`Restrict`].
#[derive(Debug, Clone, Default)]
pub struct RestrictLayer(pub Arc<Restrictions>);

impl<S> tower::Layer<S> for RestrictLayer {
    type Service = Restrict<S>;

    fn layer(&self, inner: S) -> Restrict<S> {
        Restrict {
            inner,
            restrictions: self.0.clone(),
        }
    }
}

/// Refuses calls to restricted groups that lack their metadata; passes the rest on.
#[derive(Debug, Clone)]
pub struct Restrict<S> {
    inner: S,
    restrictions: Arc<Restrictions>,
}

impl<S> tower::Service<Request<Body>> for Restrict<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = futures::future::Either<
        futures::future::Ready<Result<Response<Body>, S::Error>>,
        S::Future,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        if !self.restrictions.is_empty() {
            if let Some(status) = refusal(&self.restrictions, &request) {
                return futures::future::Either::Left(futures::future::ready(Ok(
                    status.into_http()
                )));
            }
        }
        futures::future::Either::Right(self.inner.call(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn every_rpc_has_tritons_group() {
        let cases = [
            ("/grpc.health.v1.Health/Check", Some(ApiGroup::Health)),
            (
                "/inference.GRPCInferenceService/ServerLive",
                Some(ApiGroup::Health),
            ),
            (
                "/inference.GRPCInferenceService/ModelReady",
                Some(ApiGroup::Health),
            ),
            (
                "/inference.GRPCInferenceService/ServerMetadata",
                Some(ApiGroup::Metadata),
            ),
            (
                "/inference.GRPCInferenceService/ModelStreamInfer",
                Some(ApiGroup::Inference),
            ),
            (
                "/inference.GRPCInferenceService/ModelConfig",
                Some(ApiGroup::ModelConfig),
            ),
            (
                "/inference.GRPCInferenceService/ModelStatistics",
                Some(ApiGroup::Statistics),
            ),
            (
                "/inference.GRPCInferenceService/RepositoryModelUnload",
                Some(ApiGroup::ModelRepository),
            ),
            (
                "/inference.GRPCInferenceService/CudaSharedMemoryStatus",
                Some(ApiGroup::SharedMemory),
            ),
            (
                "/inference.GRPCInferenceService/TraceSetting",
                Some(ApiGroup::Trace),
            ),
            (
                "/inference.GRPCInferenceService/LogSettings",
                Some(ApiGroup::Logging),
            ),
            ("/inference.GRPCInferenceService/NoSuchMethod", None),
            ("/other.Service/ModelInfer", None),
        ];
        for (path, group) in cases {
            assert_eq!(group_of(path), group, "{path}");
        }
    }

    #[test]
    fn a_restricted_call_needs_the_exact_metadata() {
        let flags = ["inference:key=secret".to_string()];
        let restrictions = Restrictions::parse(
            &flags,
            "grpc-restricted-protocol",
            RESTRICTED_HEADER_PREFIX,
            "protocol",
        )
        .expect("valid");
        let call = |path: &str, value: Option<&str>| {
            let mut request = Request::builder().uri(path);
            if let Some(value) = value {
                request = request.header("triton-grpc-protocol-key", value);
            }
            refusal(&restrictions, &request.body(()).expect("request"))
        };
        let infer = "/inference.GRPCInferenceService/ModelInfer";
        for value in [None, Some("wrong")] {
            let status = call(infer, value).expect("refused");
            assert_eq!(status.code(), Code::Unavailable);
            assert_eq!(
                status.message(),
                "This protocol is restricted, expecting header 'triton-grpc-protocol-key'"
            );
        }
        assert!(call(infer, Some("secret")).is_none());
        assert!(call("/inference.GRPCInferenceService/ServerLive", None).is_none());
    }
}
