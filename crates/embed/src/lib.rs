//! Nereid as a library: start the server inside a Rust process. A Rust program that wants
//! Triton-compatible serving without a separate process builds [`Options`], starts a
//! [`Nereid`] (backends, response cache, model repository, start-up models) and calls the
//! core facade in-process through [`Nereid::server`]. Serving ports is the next crate
//! up, `nereid-serve`; the `nereid` binary uses both, Triton's C ABI
//! (`libtritonserver.so`) only this one, so it links no frontend.
//!
//! This crate is where the wiring is decided: which backends serve which models
//! ([`backends`]) and which response-cache store a `--cache-config` means ([`caches`]),
//! with the C ABI's plugin loaders passed in through the core's loader traits.
//!
//! - [`options`]: what to start (the library's share of tritonserver's flags).
//! - [`nereid`]: start-up, the poll task and shutdown.
//! - [`backends`]: the backend registry built from `--backend-config` settings.
//! - [`caches`]: the response cache's store: local, Redis or a TRITONCACHE library.
//! - `system_metrics`: the CPU and memory gauges both the metrics port and
//!   `TRITONSERVER_ServerMetrics` export.

pub mod backends;
pub mod caches;
pub mod nereid;
pub mod options;
mod system_metrics;

pub use nereid::Nereid;
pub use options::Options;
pub use system_metrics::{SystemMetrics, DEFAULT_METRICS_INTERVAL};
