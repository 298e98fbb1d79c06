//! Triton's C ABI, an edge like HTTP and gRPC: programs built against Triton's
//! `tritonserver.h` (API 1.34), backend libraries built against `tritonbackend.h` (1.19,
//! hosted in `backend/`: Triton's python backend among them) and cache plugins built
//! against `tritoncache.h` (0.1) link to this crate's `libtritonserver.so` unchanged, and
//! the nereid binary uses the same code to host backend and cache libraries.
//!
//! The crate supplies loaders, not choices: `nereid-embed` decides which backend serves a
//! model and which cache store a configuration means, and calls [`backend::HostedBackends`]
//! and [`cache::CacheLibraries`] through the core's loader traits. It links no network
//! frontend.
//!
//! Every handle is an opaque box owned across the boundary with explicit create and delete
//! calls; every pointer a caller passes is checked for null; every failure is a
//! [`error::TRITONSERVER_Error`] with Triton's codes. `unsafe` is allowed module by module,
//! only in the files that hold it (the C boundary and the memory it hands over). Outside
//! this crate, `unsafe` code lives only in `nereid-shm` (raw memory), `nereid-alloc-track`
//! (a test allocator), the ONNX backend's string tensors and the load generator's shared
//! memory; the core forbids it.
// The exported names are Triton's, not Rust's.
#![allow(non_camel_case_types, non_snake_case)]
// The exported functions are called from C; their safety contract is the one Triton's
// headers document for each (valid pointers or null), checked here as far as C allows.
#![allow(clippy::missing_safety_doc)]

pub mod backend;
pub mod buffer_attributes;
pub mod cache;
pub mod dl;
pub mod error;
pub mod exports;
pub mod ffi;
pub mod inprocess;
pub mod log;
pub mod metrics;
pub mod types;

pub use exports::exported_functions;
