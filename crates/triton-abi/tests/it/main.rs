//! Integration tests of libtritonserver.so's in-process API: a C program compiled against
//! the library, and the same calls made directly from Rust.

// Calling a C ABI from Rust needs unsafe code; this crate is where it is allowed.
#![allow(unsafe_code)]

mod c_program;
mod decoupled;
mod direct;
mod fixture;
mod metrics_options;
mod output_query;
mod tracing;
