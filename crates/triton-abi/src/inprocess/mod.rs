//! Triton's in-process server API (`TRITONSERVER_*` of `tritonserver.h`, API 1.34): a
//! program creates a server from options, builds inference requests, submits them and
//! reads the responses through its own allocator, all without a network hop. Each call
//! is one call on the same core facade the HTTP and gRPC frontends use.

pub mod allocator;
pub mod engine;
pub mod infer;
mod input;
pub mod message;
pub mod metrics;
pub mod options;
pub mod parameter;
pub mod request;
pub mod response;
pub mod server;
pub mod tensors;
pub mod unsupported;
