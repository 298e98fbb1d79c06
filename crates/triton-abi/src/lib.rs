//! Triton's C ABI, an edge like HTTP and gRPC: programs built against Triton's
//! `tritonserver.h` (API 1.34) and cache plugins built against `tritoncache.h` (0.1) link
//! to this crate's `libtritonserver.so` unchanged, and the nereid binary uses the same
//! code to host cache plugins.
//!
//! Every handle is an opaque box owned across the boundary with explicit create and delete
//! calls; every pointer a caller passes is checked for null; every failure is a
//! [`error::TRITONSERVER_Error`] with Triton's codes. This crate and the memory modules of
//! the core are the only places with `unsafe` code.
#![allow(unsafe_code)]
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
