//! The trace flags as tritonserver 2.51 reads them: `--trace-config [<mode>,]<setting>=<value>`
//! (global `level`, `rate`, `count`, `mode`; `triton,file`, `triton,log-frequency`;
//! `opentelemetry,<setting>`, kept for the exporter, see [`otlp_options`]) and
//! the deprecated `--trace-file`, `--trace-level`, `--trace-rate`, `--trace-count`,
//! `--trace-log-frequency`, which `--trace-config` overrides. Unlike tritonserver,
//! unknown settings and out-of-range numbers are refused rather than ignored.

use anyhow::{bail, Context};
use nereid_core::trace::{TraceLevel, TraceMode, TraceOptions};
use nereid_otel::{bsp_defaults, OtlpOptions};

/// The deprecated flags' values, as given.
#[derive(Debug, Default)]
pub struct Deprecated<'a> {
    /// `--trace-file`.
    pub file: Option<&'a str>,
    /// `--trace-level` (repeatable).
    pub level: &'a [String],
    /// `--trace-rate`.
    pub rate: Option<&'a str>,
    /// `--trace-count`.
    pub count: Option<&'a str>,
    /// `--trace-log-frequency`.
    pub log_frequency: Option<&'a str>,
}

/// Builds the start-up trace settings from the flags.
pub fn parse(config: &[String], deprecated: &Deprecated<'_>) -> anyhow::Result<TraceOptions> {
    let mut options = TraceOptions::default();
    let mut otel_settings = Vec::new();
    let mut level = TraceLevel::OFF;
    let mut disable = false;
    for name in deprecated.level {
        add_level(&mut level, &mut disable, name).context("Bad option: \"--trace-level\"")?;
    }
    if let Some(file) = deprecated.file {
        options.file = file.to_string();
    }
    if let Some(rate) = deprecated.rate {
        options.rate = rate_value(rate).context("Bad option: \"--trace-rate\"")?;
    }
    if let Some(count) = deprecated.count {
        options.count = count_value(count).context("Bad option: \"--trace-count\"")?;
    }
    if let Some(frequency) = deprecated.log_frequency {
        options.log_frequency =
            frequency_value(frequency).context("Bad option: \"--trace-log-frequency\"")?;
    }
    for arg in config {
        let (mode, setting, value) = split(arg)?;
        let bad = || format!("Bad option: \"--trace-config {arg}\"");
        match (mode, setting) {
            (None, "level") => add_level(&mut level, &mut disable, value).with_context(bad)?,
            (None, "rate") => options.rate = rate_value(value).with_context(bad)?,
            (None, "count") => options.count = count_value(value).with_context(bad)?,
            (None, "mode") => options.mode = mode_value(value).with_context(bad)?,
            (Some(TraceMode::Triton), "file") => options.file = value.to_string(),
            (Some(TraceMode::Triton), "log-frequency") => {
                options.log_frequency = frequency_value(value).with_context(bad)?
            }
            (Some(TraceMode::OpenTelemetry), setting) => {
                otel_settings.push((setting.to_string(), value.to_string()))
            }
            (None, other) => bail!(
                "{}: unknown trace setting '{other}' (expected level, rate, count, mode, or \
                 triton,file / triton,log-frequency)",
                bad()
            ),
            (Some(TraceMode::Triton), other) => bail!(
                "{}: unknown triton trace setting '{other}' (expected file or log-frequency)",
                bad()
            ),
        }
    }
    options.level = if disable { TraceLevel::OFF } else { level };
    // As in tritonserver, a mode's own settings count only when that mode is chosen,
    // and the batch span processor's missing ones are added from `OTEL_BSP_*`.
    if options.mode == TraceMode::OpenTelemetry {
        let env = |name: &str| std::env::var(name).ok();
        let defaults = bsp_defaults(&otel_settings, &env);
        for (setting, value) in &otel_settings {
            check_bsp_number(
                setting,
                value,
                &format!("--trace-config opentelemetry,{setting}"),
            )?;
        }
        for (setting, value) in &defaults {
            check_bsp_number(
                setting,
                value,
                &format!("OTEL_{}", setting.to_ascii_uppercase()),
            )?;
        }
        options.mode_settings = otel_settings;
        options.mode_settings.extend(defaults);
    }
    Ok(options)
}

/// A batch span processor setting (`bsp_*`) must be an unsigned 32-bit number; one that
/// is not is refused naming where it came from (`source`: the flag or the `OTEL_BSP_*`
/// variable), in tritonserver's words.
fn check_bsp_number(setting: &str, value: &str, source: &str) -> anyhow::Result<()> {
    if setting.starts_with("bsp_") && value.parse::<u32>().is_err() {
        bail!("Bad option: \"{source}\".\nInvalid option value. Got {value}");
    }
    Ok(())
}

/// The OTLP exporter's options when the `opentelemetry` mode is chosen; bad settings
/// stop start-up.
pub fn otlp_options(options: &TraceOptions) -> anyhow::Result<Option<OtlpOptions>> {
    if options.mode != TraceMode::OpenTelemetry {
        return Ok(None);
    }
    OtlpOptions::from_settings(&options.mode_settings)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("Bad option: \"--trace-config {e}\""))
}

/// `[<mode>,]<setting>=<value>`, with tritonserver's messages.
fn split(arg: &str) -> anyhow::Result<(Option<TraceMode>, &str, &str)> {
    let (mode, rest) = match arg.split_once(',') {
        Some(("", _)) => bail!(
            "No trace mode specified. --trace-config option format is <trace mode>,<setting>=<value> \
             or <setting>=<value>. Got {arg}"
        ),
        Some((mode, rest)) => (Some(mode_value(mode)?), rest),
        None => (None, arg),
    };
    match rest.split_once('=') {
        Some((setting, value)) if !setting.is_empty() && !value.is_empty() => {
            Ok((mode, setting, value))
        }
        _ => bail!("--trace-config option format is '<trace mode>,<setting>=<value>'. Got {arg}"),
    }
}

fn mode_value(value: &str) -> anyhow::Result<TraceMode> {
    match value.to_ascii_lowercase().as_str() {
        "triton" => Ok(TraceMode::Triton),
        "opentelemetry" => Ok(TraceMode::OpenTelemetry),
        _ => bail!(
            "invalid value for trace mode option: {value}. Available options are \"triton\" and \
             \"opentelemetry\""
        ),
    }
}

/// tritonserver's level names (any case): OFF anywhere disables tracing.
fn add_level(level: &mut TraceLevel, disable: &mut bool, value: &str) -> anyhow::Result<()> {
    match value.to_ascii_lowercase().as_str() {
        "false" | "off" => *disable = true,
        "true" | "on" | "min" | "max" | "timestamps" => level.timestamps = true,
        "tensors" => level.tensors = true,
        _ => bail!("invalid value for trace level option: {value}"),
    }
    Ok(())
}

fn integer(value: &str) -> anyhow::Result<i64> {
    value
        .parse()
        .map_err(|_| anyhow::anyhow!("invalid value '{value}': expected an integer"))
}

/// A rate of 0 traces only requests that carry an OpenTelemetry context (Triton's way
/// to trace just those).
fn rate_value(value: &str) -> anyhow::Result<u32> {
    u32::try_from(integer(value)?)
        .map_err(|_| anyhow::anyhow!("invalid trace rate {value}: expected 0 to {}", u32::MAX))
}

fn count_value(value: &str) -> anyhow::Result<i32> {
    match i32::try_from(integer(value)?) {
        Ok(count) if count >= -1 => Ok(count),
        _ => bail!(
            "invalid trace count {value}: expected -1 (no limit) to {}",
            i32::MAX
        ),
    }
}

fn frequency_value(value: &str) -> anyhow::Result<u32> {
    u32::try_from(integer(value)?).map_err(|_| {
        anyhow::anyhow!(
            "invalid trace log frequency {value}: expected 0 to {}",
            u32::MAX
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(args: &[&str]) -> anyhow::Result<TraceOptions> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        parse(&args, &Deprecated::default())
    }

    fn error(args: &[&str]) -> String {
        format!("{:#}", config(args).expect_err("refused"))
    }

    #[test]
    fn trace_config_reads_tritons_settings() {
        let options = config(&[
            "triton,file=/tmp/t.json",
            "level=TIMESTAMPS",
            "level=tensors",
            "rate=5",
            "count=3",
            "triton,log-frequency=2",
            "mode=triton",
        ])
        .expect("valid");
        assert_eq!(options.file, "/tmp/t.json");
        assert!(options.level.timestamps && options.level.tensors);
        assert_eq!(
            (options.rate, options.count, options.log_frequency),
            (5, 3, 2)
        );
        assert_eq!(config(&[]).expect("defaults"), TraceOptions::default());
        // OFF anywhere wins, as in tritonserver.
        assert!(config(&["level=TIMESTAMPS", "level=OFF"])
            .expect("ok")
            .level
            .is_off());
    }

    #[test]
    fn trace_config_overrides_the_deprecated_flags() {
        let levels = vec!["TIMESTAMPS".to_string()];
        let deprecated = Deprecated {
            file: Some("/tmp/old.json"),
            level: &levels,
            rate: Some("7"),
            count: Some("2"),
            log_frequency: Some("4"),
        };
        let options = parse(&["rate=9".to_string()], &deprecated).expect("valid");
        assert_eq!(options.file, "/tmp/old.json");
        assert!(options.level.timestamps);
        assert_eq!(
            (options.rate, options.count, options.log_frequency),
            (9, 2, 4)
        );
    }

    #[test]
    fn opentelemetry_settings_reach_the_exporter() {
        let options = config(&[
            "mode=opentelemetry",
            "opentelemetry,url=collector:4318/v1/traces",
            "opentelemetry,resource=service.name=nereid",
            "opentelemetry,bsp_max_queue_size=16",
            "rate=0",
        ])
        .expect("valid");
        assert_eq!(options.mode, TraceMode::OpenTelemetry);
        assert_eq!(options.rate, 0);
        // The given three, then the batch processor's two missing defaults.
        assert_eq!(options.mode_settings.len(), 5);
        let otlp = otlp_options(&options).expect("valid").expect("otel mode");
        assert_eq!(otlp.url.as_deref(), Some("http://collector:4318/v1/traces"));
        assert_eq!(otlp.max_queue_size, 16);
        // Another mode's settings are ignored, as in tritonserver.
        let options = config(&["opentelemetry,url=x"]).expect("valid");
        assert!(options.mode_settings.is_empty());
        assert_eq!(otlp_options(&options).expect("valid"), None);
        let bad =
            config(&["mode=opentelemetry", "opentelemetry,bsp_schedule_delay=0"]).expect("parsed");
        let message = format!("{:#}", otlp_options(&bad).expect_err("refused"));
        assert!(message.contains("bsp_schedule_delay=0"), "{message}");
    }

    #[test]
    fn bad_trace_flags_are_refused_with_a_reason() {
        assert!(error(&["level=LOUD"]).contains("invalid value for trace level option: LOUD"));
        assert!(error(&["rate=-3"]).contains("invalid trace rate -3"));
        assert!(error(&["count=-2"]).contains("invalid trace count -2"));
        assert!(error(&["triton,log-frequency=x"]).contains("expected an integer"));
        assert!(error(&["colour=red"]).contains("unknown trace setting 'colour'"));
        assert!(error(&["triton,url=x"]).contains("unknown triton trace setting 'url'"));
        assert!(error(&["jaeger,file=x"]).contains("invalid value for trace mode option: jaeger"));
        assert!(error(&["level"]).contains("option format is"));
        assert!(error(&[",level=OFF"]).contains("No trace mode specified"));
        // Batch span processor numbers are checked when read, naming their source.
        let bad = error(&[
            "mode=opentelemetry",
            "opentelemetry,bsp_max_queue_size=bad_value",
        ]);
        assert!(
            bad.starts_with("Bad option: \"--trace-config opentelemetry,bsp_max_queue_size\"."),
            "{bad}"
        );
        let from_env = check_bsp_number("bsp_schedule_delay", "x", "OTEL_BSP_SCHEDULE_DELAY");
        assert_eq!(
            format!("{:#}", from_env.expect_err("refused")),
            "Bad option: \"OTEL_BSP_SCHEDULE_DELAY\".\nInvalid option value. Got x"
        );
    }
}
