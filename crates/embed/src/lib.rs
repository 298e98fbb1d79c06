//! Nereid as a library. A Rust program that wants Triton-compatible serving without a
//! separate process builds [`Options`], starts a [`Nereid`] (backends, model repository,
//! start-up models), calls the core facade in-process through [`Nereid::server`], and may
//! also [`serve`] HTTP, gRPC and metrics on listeners it bound itself. The `nereid`
//! binary is a thin `main` over this crate; Triton's C ABI (`libtritonserver.so`) starts
//! its server with the same [`Nereid::start`].
//!
//! - [`options`]: what to start (the library's share of tritonserver's flags).
//! - [`nereid`]: start-up, the poll task and shutdown.
//! - [`backends`]: the backend registry built from `--backend-config` settings.
//! - [`serve`]: the network frontends, run until a shutdown future resolves.

pub mod backends;
mod metrics;
pub mod nereid;
pub mod options;
pub mod serve;
mod system_metrics;

pub use metrics::MetricsAppendix;
pub use nereid::Nereid;
pub use options::Options;
pub use serve::{serve, FrontendOptions, Listeners};
pub use system_metrics::{SystemMetrics, DEFAULT_METRICS_INTERVAL};
