//! The exporter's settings as tritonserver 2.51 takes them: `--trace-config
//! opentelemetry,<setting>=<value>` for `url`, `resource` (repeatable `key=value`) and the
//! batch span processor's `bsp_max_queue_size`, `bsp_schedule_delay`,
//! `bsp_max_export_batch_size`, whose defaults come from the `OTEL_BSP_*` variables
//! ([`bsp_defaults`]). Unlike tritonserver, unknown settings and bad numbers are refused
//! instead of ignored.

use std::time::Duration;

/// Triton's default `service.name` resource attribute.
pub const DEFAULT_SERVICE_NAME: &str = "triton-inference-server";

/// How and where spans are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpOptions {
    /// The collector's OTLP/HTTP traces endpoint (`http://` is added when missing);
    /// `None` leaves it to `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` /
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, else Triton's `http://localhost:4318/v1/traces`.
    pub url: Option<String>,
    /// Resource attributes, in the order given; later ones win.
    pub resource: Vec<(String, String)>,
    /// Spans held for export at most; more are dropped and counted.
    pub max_queue_size: usize,
    /// The longest a span waits before its batch is sent.
    pub schedule_delay: Duration,
    /// Spans sent in one export request at most.
    pub max_export_batch_size: usize,
}

impl Default for OtlpOptions {
    /// The OpenTelemetry SDK's defaults (queue 2048, delay 5000 ms, batch 512).
    fn default() -> Self {
        Self {
            url: None,
            resource: Vec::new(),
            max_queue_size: 2048,
            schedule_delay: Duration::from_millis(5000),
            max_export_batch_size: 512,
        }
    }
}

impl OtlpOptions {
    /// The options from `--trace-config opentelemetry,...` pairs, over the defaults.
    pub fn from_settings(settings: &[(String, String)]) -> Result<Self, String> {
        let mut options = Self::default();
        for (setting, value) in settings {
            options
                .apply(setting, value)
                .map_err(|e| format!("opentelemetry,{setting}={value}: {e}"))?;
        }
        // A batch larger than the queue could never fill: cap it, as the SDKs do.
        options.max_export_batch_size = options.max_export_batch_size.min(options.max_queue_size);
        Ok(options)
    }

    fn apply(&mut self, setting: &str, value: &str) -> Result<(), String> {
        match setting {
            "url" => self.url = Some(endpoint(value)?),
            "resource" => match value.split_once('=') {
                Some((key, attribute)) if !key.is_empty() => {
                    self.resource.push((key.to_string(), attribute.to_string()))
                }
                _ => return Err("expected resource=<key>=<value>".to_string()),
            },
            "bsp_max_queue_size" => self.max_queue_size = positive(value)?,
            "bsp_schedule_delay" => {
                self.schedule_delay = Duration::from_millis(positive(value)? as u64)
            }
            "bsp_max_export_batch_size" => self.max_export_batch_size = positive(value)?,
            other => {
                return Err(format!(
                    "unknown opentelemetry trace setting '{other}' (expected url, resource, \
                     bsp_max_queue_size, bsp_schedule_delay or bsp_max_export_batch_size)"
                ))
            }
        }
        Ok(())
    }
}

/// `host:port/path` or a full `http://` URL; HTTPS needs TLS, which this build lacks.
fn endpoint(value: &str) -> Result<String, String> {
    let url = if value.contains("://") {
        value.to_string()
    } else {
        format!("http://{value}")
    };
    if !url.starts_with("http://") {
        return Err("only http:// collector URLs are supported (no TLS in this build)".into());
    }
    if url.len() == "http://".len() {
        return Err("the collector URL names no host".into());
    }
    Ok(url)
}

/// The batch span processor settings not given in `settings`, as tritonserver adds them
/// to its configuration (and lists them in the trace settings answer): each from its
/// `OTEL_BSP_*` variable (looked up with `env`), else the SDK default.
pub fn bsp_defaults(
    settings: &[(String, String)],
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    [
        (
            "bsp_max_export_batch_size",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
            "512",
        ),
        ("bsp_max_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE", "2048"),
        ("bsp_schedule_delay", "OTEL_BSP_SCHEDULE_DELAY", "5000"),
    ]
    .into_iter()
    .filter(|(name, _, _)| !settings.iter().any(|(given, _)| given == name))
    .map(|(name, variable, default)| {
        (
            name.to_string(),
            env(variable).unwrap_or_else(|| default.to_string()),
        )
    })
    .collect()
}

fn positive(value: &str) -> Result<usize, String> {
    match value.parse::<u32>() {
        Ok(n) if n > 0 => Ok(n as usize),
        _ => Err(format!(
            "invalid value '{value}': expected an integer from 1 to {}",
            u32::MAX
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn tritons_settings_and_defaults() {
        assert_eq!(OtlpOptions::from_settings(&[]), Ok(OtlpOptions::default()));
        let options = OtlpOptions::from_settings(&pairs(&[
            ("url", "collector:4318/v1/traces"),
            ("resource", "service.name=nereid"),
            ("resource", "deployment=a=b"),
            ("bsp_max_queue_size", "8"),
            ("bsp_schedule_delay", "20"),
            ("bsp_max_export_batch_size", "4"),
        ]))
        .expect("valid");
        assert_eq!(
            options.url.as_deref(),
            Some("http://collector:4318/v1/traces")
        );
        assert_eq!(
            options.resource,
            pairs(&[("service.name", "nereid"), ("deployment", "a=b")])
        );
        assert_eq!(options.max_queue_size, 8);
        assert_eq!(options.schedule_delay, Duration::from_millis(20));
        assert_eq!(options.max_export_batch_size, 4);
    }

    #[test]
    fn bsp_defaults_fill_in_what_was_not_given_from_the_environment() {
        let env = |name: &str| (name == "OTEL_BSP_MAX_QUEUE_SIZE").then(|| "100".to_string());
        let given = pairs(&[("bsp_schedule_delay", "20")]);
        assert_eq!(
            bsp_defaults(&given, &env),
            pairs(&[
                ("bsp_max_export_batch_size", "512"),
                ("bsp_max_queue_size", "100")
            ])
        );
        let mut all = given.clone();
        all.extend(bsp_defaults(&given, &env));
        let options = OtlpOptions::from_settings(&all).expect("valid");
        assert_eq!(options.max_queue_size, 100);
        assert_eq!(options.max_export_batch_size, 100, "capped by the queue");
    }

    #[test]
    fn bad_settings_are_refused_with_the_setting_named() {
        for (setting, value, expected) in [
            ("bsp_max_queue_size", "0", "expected an integer"),
            ("bsp_schedule_delay", "-5", "expected an integer"),
            ("resource", "novalue", "resource=<key>=<value>"),
            ("url", "https://collector", "no TLS"),
            ("ur1", "x", "unknown opentelemetry trace setting 'ur1'"),
        ] {
            let error =
                OtlpOptions::from_settings(&pairs(&[(setting, value)])).expect_err("refused");
            assert!(error.contains(expected), "{error}");
            assert!(error.contains(setting), "{error}");
        }
        let capped = OtlpOptions::from_settings(&pairs(&[
            ("bsp_max_queue_size", "4"),
            ("bsp_max_export_batch_size", "5"),
        ]))
        .expect("valid");
        assert_eq!(capped.max_export_batch_size, 4);
    }
}
