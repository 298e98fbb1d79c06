//! Log setup from `--log-verbose`, `--log-info`, `--log-warning`, `--log-error` and
//! `--log-format`; logs go to stderr.

use tracing_subscriber::EnvFilter;

use crate::cli::{Config, LogFormat};

/// Installs the global subscriber.
pub fn init(config: &Config) {
    let cli = &config.cli;
    let level = if cli.log_verbose > 1 {
        "trace"
    } else if cli.log_verbose == 1 {
        "debug"
    } else if cli.log_info {
        "info"
    } else if cli.log_warning {
        "warn"
    } else if cli.log_error {
        "error"
    } else {
        "off"
    };
    // Dependencies stay at warnings unless verbose logging is on.
    let deps = if cli.log_verbose > 0 { level } else { "warn" };
    let filter = EnvFilter::new(format!(
        "{deps},nereid={level},nereid_core={level},nereid_http={level},nereid_grpc={level},nereid_backend_onnx={level}"
    ));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false);
    match config.log_format {
        LogFormat::Default => builder.compact().init(),
        LogFormat::Iso8601 => builder.init(),
    }
}
