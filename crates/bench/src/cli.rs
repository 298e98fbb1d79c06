//! The command line. Flag names follow `perf_analyzer` where it has the same knob, so a
//! command line written for Triton's tool mostly carries over.

use std::fmt;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// `nereid-bench`: load generator for KServe v2 inference servers (Nereid, Triton).
#[derive(Parser, Debug)]
#[command(name = "nereid-bench", version, about, long_about = None)]
pub struct Args {
    /// Model to benchmark.
    #[arg(short = 'm', long = "model-name")]
    pub model_name: String,

    /// Model version; empty means the server's choice (the latest ready version).
    #[arg(short = 'x', long = "model-version", default_value = "")]
    pub model_version: String,

    /// Server address as host:port; defaults to localhost:8000 for HTTP and localhost:8001
    /// for gRPC. A leading `http://` is accepted and ignored.
    #[arg(short = 'u', long = "url")]
    pub url: Option<String>,

    /// Protocol used for every request.
    #[arg(short = 'i', long = "protocol", value_enum, default_value_t = Protocol::Http)]
    pub protocol: Protocol,

    /// Send requests over gRPC `ModelStreamInfer` streams (one stream per connection).
    #[arg(long)]
    pub streaming: bool,

    /// Batch size of every request: the leading dimension of each input of a batching model.
    #[arg(short = 'b', long = "batch-size", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_size: u32,

    /// Shape of an input without the batch dimension, as NAME:d1,d2,...; needed for every
    /// input whose model shape has a variable (-1) dimension. Repeatable.
    #[arg(long = "shape", value_parser = parse_shape_override)]
    pub shapes: Vec<ShapeOverride>,

    /// Tensor contents: `random` (seeded, the same for the whole run) or `zero`.
    #[arg(long = "input-data", value_enum, default_value_t = InputData::Random)]
    pub input_data: InputData,

    /// Where tensors travel: `none` (in the requests) or `system` (POSIX shared memory the
    /// benchmark creates and registers with the server: one region per worker holding its
    /// inputs and outputs; requests carry only references). The server must allow client
    /// shared memory (`--allow-client-shm=true` on Nereid and on Triton after 2.51).
    #[arg(long = "shared-memory", value_enum, default_value_t = SharedMemory::None)]
    pub shared_memory: SharedMemory,

    /// With --shared-memory system: bytes reserved for each output. Defaults to the
    /// output's size from the model metadata and batch size; required when an output has a
    /// variable dimension or is BYTES.
    #[arg(long = "output-shared-memory-size")]
    pub output_shared_memory_size: Option<u64>,

    /// Sequence mode, for models with the sequence batcher: each worker sends sequences of
    /// this many requests (START on the first, END on the last) under its own correlation
    /// ID, so concurrency N keeps N sequences live. Closed loop only.
    #[arg(long = "sequence-length", conflicts_with_all = ["request_rate_range", "shared_memory"])]
    pub sequence_length: Option<usize>,

    /// Seed of the random input data and of Poisson arrival times.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Closed-loop sweep: numbers of concurrent workers, as start[:end[:step]]. Each worker
    /// sends its next request as soon as the previous one is answered. The default mode,
    /// at concurrency 1.
    #[arg(long = "concurrency-range", value_parser = parse_concurrency_range,
          conflicts_with = "request_rate_range")]
    pub concurrency_range: Option<SweepRange<usize>>,

    /// Open-loop sweep: request rates in requests per second, as start[:end[:step]].
    #[arg(long = "request-rate-range", value_parser = parse_rate_range)]
    pub request_rate_range: Option<SweepRange<f64>>,

    /// Arrival process of the open loop.
    #[arg(long = "request-distribution", value_enum, default_value_t = Distribution::Constant)]
    pub request_distribution: Distribution,

    /// Open loop only: most requests in flight at once (each holds one connection). A
    /// request due while all are busy is sent late and counted as delayed.
    #[arg(long = "max-in-flight", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_in_flight: u32,

    /// Client threads, each a single-threaded event loop owning its share of the workers
    /// and connections. One is plenty up to tens of thousands of requests per second and
    /// leaves the other cores to a server on the same machine.
    #[arg(long = "client-threads", visible_alias = "max-threads", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub client_threads: u32,

    /// Seconds of load before the first measurement window of every sweep step.
    #[arg(long = "warmup-secs", default_value_t = 1.0, value_parser = parse_non_negative)]
    pub warmup_secs: f64,

    /// Length of one measurement window in milliseconds.
    #[arg(short = 'p', long = "measurement-interval", default_value_t = 2000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub measurement_interval: u64,

    /// Stable means the last three windows' throughputs lie within this percentage of
    /// their mean.
    #[arg(short = 's', long = "stability-percentage", default_value_t = 10.0,
          value_parser = parse_non_negative)]
    pub stability_percentage: f64,

    /// Most measurement windows per step; the last three are reported even if unstable.
    #[arg(short = 'r', long = "max-trials", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(3..))]
    pub max_trials: u32,

    /// Also write the results as CSV to this file.
    #[arg(short = 'f', long = "csv")]
    pub csv: Option<PathBuf>,

    /// Also write the results as JSON to this file.
    #[arg(long = "json")]
    pub json: Option<PathBuf>,

    /// No progress line on stderr.
    #[arg(long)]
    pub quiet: bool,

    /// Print the throughput of every measurement window on stderr.
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

impl Args {
    /// The server address as host:port, with the protocol's default port filled in.
    pub fn address(&self) -> String {
        match &self.url {
            Some(url) => {
                let url = url.trim_start_matches("http://");
                url.trim_end_matches('/').to_string()
            }
            None => match self.protocol {
                Protocol::Http => "localhost:8000".to_string(),
                Protocol::Grpc => "localhost:8001".to_string(),
            },
        }
    }
}

/// Where tensor data travels (`perf_analyzer`'s `--shared-memory`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SharedMemory {
    /// In the request and response bodies.
    None,
    /// In system (POSIX) shared memory.
    System,
}

/// Wire protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// KServe v2 HTTP/REST with the binary tensor data extension.
    Http,
    /// KServe v2 gRPC (`inference.GRPCInferenceService`).
    Grpc,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Http => "http",
            Protocol::Grpc => "grpc",
        })
    }
}

/// How input tensors are filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum InputData {
    /// Seeded pseudo-random values; BYTES elements are short alphanumeric strings.
    Random,
    /// Zeros; BYTES elements are the string "0".
    Zero,
}

/// Arrival process of the open loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Evenly spaced requests.
    Constant,
    /// Exponentially distributed gaps (a Poisson process) with the same mean rate.
    Poisson,
}

/// `--shape NAME:d1,d2,...`: the shape of one input, without the batch dimension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeOverride {
    /// Input name.
    pub name: String,
    /// Dimensions, all non-negative.
    pub dims: Vec<i64>,
}

/// A sweep `start:end:step`, inclusive of `end`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SweepRange<T> {
    /// First value.
    pub start: T,
    /// Last value (reached only if `start + k * step` hits it).
    pub end: T,
    /// Increment.
    pub step: T,
}

impl SweepRange<usize> {
    /// The values of the sweep, in order.
    pub fn values(&self) -> Vec<usize> {
        (self.start..=self.end).step_by(self.step).collect()
    }
}

impl SweepRange<f64> {
    /// The values of the sweep, in order. A small tolerance keeps `end` in the sweep when
    /// floating point steps land a hair past it.
    pub fn values(&self) -> Vec<f64> {
        let mut out = Vec::new();
        let tolerance = self.step * 1e-9;
        let mut k = 0u32;
        loop {
            let v = self.start + f64::from(k) * self.step;
            if v > self.end + tolerance {
                break;
            }
            out.push(v);
            if self.step <= 0.0 {
                break;
            }
            k += 1;
        }
        out
    }
}

/// Parses `NAME:d1,d2,...`. The name may itself contain colons; the dims follow the last.
pub fn parse_shape_override(s: &str) -> Result<ShapeOverride, String> {
    let (name, dims) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("expected NAME:d1,d2,... but got '{s}'"))?;
    if name.is_empty() {
        return Err(format!("missing input name in '{s}'"));
    }
    let dims = dims
        .split(',')
        .map(|d| match d.trim().parse::<i64>() {
            Ok(v) if v >= 0 => Ok(v),
            _ => Err(format!(
                "bad dimension '{d}' in '{s}': expected a non-negative integer"
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ShapeOverride {
        name: name.to_string(),
        dims,
    })
}

/// Splits `start[:end[:step]]` into its parts; missing `end` is `start`.
fn split_range(s: &str) -> Result<(&str, Option<&str>, Option<&str>), String> {
    let mut parts = s.split(':');
    let start = parts.next().unwrap_or_default();
    let end = parts.next();
    let step = parts.next();
    if parts.next().is_some() {
        return Err(format!("expected start[:end[:step]] but got '{s}'"));
    }
    Ok((start, end, step))
}

/// Parses a concurrency sweep: positive integers, `end >= start`, step defaults to 1.
pub fn parse_concurrency_range(s: &str) -> Result<SweepRange<usize>, String> {
    let (start, end, step) = split_range(s)?;
    let num = |v: &str| {
        v.trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| format!("'{v}' in '{s}' is not a positive integer"))
    };
    let start = num(start)?;
    let end = end.map(num).transpose()?.unwrap_or(start);
    let step = step.map(num).transpose()?.unwrap_or(1);
    if end < start {
        return Err(format!("end {end} is below start {start} in '{s}'"));
    }
    Ok(SweepRange { start, end, step })
}

/// Parses a request-rate sweep: positive numbers, `end >= start`, step defaults to 1.
pub fn parse_rate_range(s: &str) -> Result<SweepRange<f64>, String> {
    let (start, end, step) = split_range(s)?;
    let num = |v: &str| {
        v.trim()
            .parse::<f64>()
            .ok()
            .filter(|&n| n.is_finite() && n > 0.0)
            .ok_or_else(|| format!("'{v}' in '{s}' is not a positive number"))
    };
    let start = num(start)?;
    let end = end.map(num).transpose()?.unwrap_or(start);
    let step = step.map(num).transpose()?.unwrap_or(1.0);
    if end < start {
        return Err(format!("end {end} is below start {start} in '{s}'"));
    }
    Ok(SweepRange { start, end, step })
}

/// Parses a finite number that is zero or more.
fn parse_non_negative(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| format!("'{s}' is not a non-negative number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_override_parses_name_and_dims() {
        let s = parse_shape_override("INPUT0:3,224,224").expect("valid");
        assert_eq!(s.name, "INPUT0");
        assert_eq!(s.dims, vec![3, 224, 224]);
        let s = parse_shape_override("scope:x:5").expect("colon in name");
        assert_eq!(s.name, "scope:x");
        assert_eq!(s.dims, vec![5]);
    }

    #[test]
    fn shape_override_rejects_bad_input() {
        assert!(parse_shape_override("INPUT0").is_err());
        assert!(parse_shape_override(":1,2").is_err());
        assert!(parse_shape_override("A:1,-1").is_err());
        assert!(parse_shape_override("A:1,,2").is_err());
        assert!(parse_shape_override("A:x").is_err());
    }

    #[test]
    fn concurrency_range_forms() {
        assert_eq!(
            parse_concurrency_range("4").expect("single").values(),
            vec![4]
        );
        assert_eq!(
            parse_concurrency_range("1:4").expect("pair").values(),
            vec![1, 2, 3, 4]
        );
        assert_eq!(
            parse_concurrency_range("1:8:3").expect("triple").values(),
            vec![1, 4, 7]
        );
        assert!(parse_concurrency_range("0:4").is_err());
        assert!(parse_concurrency_range("4:1").is_err());
        assert!(parse_concurrency_range("1:4:0").is_err());
        assert!(parse_concurrency_range("1:2:3:4").is_err());
    }

    #[test]
    fn rate_range_keeps_end_despite_rounding() {
        let r = parse_rate_range("0.1:0.3:0.1").expect("valid");
        assert_eq!(r.values().len(), 3);
        let r = parse_rate_range("100:400:100").expect("valid");
        assert_eq!(r.values(), vec![100.0, 200.0, 300.0, 400.0]);
        assert!(parse_rate_range("0:10").is_err());
        assert!(parse_rate_range("10:5").is_err());
    }

    #[test]
    fn cli_parses_a_perf_analyzer_like_command() {
        let args = Args::try_parse_from([
            "nereid-bench",
            "-m",
            "add_sub",
            "-u",
            "http://127.0.0.1:9000/",
            "-i",
            "grpc",
            "--concurrency-range",
            "1:4:1",
            "-p",
            "1000",
            "--shape",
            "INPUT0:4",
        ])
        .expect("valid command line");
        assert_eq!(args.address(), "127.0.0.1:9000");
        assert_eq!(args.protocol, Protocol::Grpc);
        assert_eq!(args.measurement_interval, 1000);
        assert_eq!(args.shapes.len(), 1);
        assert_eq!(args.shared_memory, SharedMemory::None);
        let shm = Args::try_parse_from([
            "nereid-bench",
            "-m",
            "x",
            "--shared-memory",
            "system",
            "--output-shared-memory-size",
            "4096",
        ])
        .expect("valid command line");
        assert_eq!(shm.shared_memory, SharedMemory::System);
        assert_eq!(shm.output_shared_memory_size, Some(4096));
        assert!(Args::try_parse_from([
            "nereid-bench",
            "-m",
            "x",
            "--concurrency-range",
            "1",
            "--request-rate-range",
            "10"
        ])
        .is_err());
    }
}
