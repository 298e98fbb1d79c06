//! Serving a started [`nereid_embed::Nereid`] on the network: the second half of what
//! the `nereid` binary does, kept apart from start-up so that a program that only calls
//! the server in-process (Triton's C ABI, `libtritonserver.so`) links no frontend.
//!
//! - [`serve`](serve()): HTTP, gRPC, SageMaker, Vertex AI and metrics on listeners the
//!   caller bound, until a shutdown future resolves, then the drain.
//! - `metrics`: the metrics port and the scrape text it shares with Vertex AI.
//!
//! Imports go one way: `serve` → `metrics` → `nereid-embed` (the started server and its
//! system gauges) and the frontend crates (`nereid-http`, `nereid-grpc`).

mod metrics;
pub mod serve;

pub use metrics::MetricsAppendix;
pub use serve::{serve, FrontendOptions, Listeners};
