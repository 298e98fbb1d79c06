//! Triton's in-process server API (`TRITONSERVER_*` of `tritonserver.h`, API 1.34): a
//! program creates a server from options, builds inference requests, submits them and
//! reads the responses through its own allocator, all without a network hop. Each call
//! is one call on the same core facade the HTTP and gRPC frontends use.
//!
//! Imports go one way: [`start`] (`TRITONSERVER_ServerNew`, the hook hosted backends
//! get their server through) → the `backend` folder → [`server`] → [`engine`]; the
//! request, response and allocator calls sit on [`engine`] and [`tensors`].

pub mod allocator;
pub mod engine;
pub mod infer;
mod input;
pub mod logging;
pub mod message;
pub mod metrics;
pub mod options;
pub mod parameter;
pub mod request;
pub mod response;
pub mod server;
pub mod start;
pub mod tensors;
pub mod trace;
