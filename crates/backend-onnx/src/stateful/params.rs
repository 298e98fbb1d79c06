//! The stateful backend's model `parameters`, with the original backend's keys, defaults
//! and load-time checks. Every value is a `string_value`, as in the original.

use std::collections::BTreeMap;
use std::path::PathBuf;

use nereid_core::{Error, Result};

/// One state tensor pair from `state_pairs`: the model input fed with the stored state
/// and the model output that replaces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatePair {
    /// The ONNX input that receives the state.
    pub input: String,
    /// The ONNX output that produces the next state.
    pub output: String,
}

/// Lazy allocation of the state buffers (`initial_buffer_size` and the other three).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LazyAllocation {
    /// Sequences the first buffer holds; allocated at load, never released.
    pub initial: usize,
    /// Sequences each further buffer holds.
    pub subsequent: usize,
    /// A buffer is added when fewer slots than this are free.
    pub alloc_threshold: usize,
    /// The last buffer is released when more slots than this are free (and it is empty).
    pub dealloc_threshold: usize,
}

/// Which ONNX Runtime execution provider runs the model (`ort_ep`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutionProvider {
    /// The CPU (the only one a `KIND_CPU` instance uses).
    Cpu,
    /// CUDA.
    Cuda,
    /// TensorRT (the original's default for GPU instances).
    TensorRt,
}

/// How much the model runner logs (`logging_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Nothing.
    None,
    /// Load-time and periodic information.
    Info,
    /// Everything, including per-execution details.
    Verbose,
}

/// Every parameter the backend reads.
#[derive(Debug, Clone)]
pub struct StatefulParams {
    /// `state_pairs`.
    pub state_pairs: Vec<StatePair>,
    /// `max_candidate_sequence_use_ratio` (default 0.9).
    pub use_ratio: f64,
    /// `infer_end_requests` (default true).
    pub infer_end_requests: bool,
    /// `store_states_as_fp16` (default false).
    pub store_states_as_fp16: bool,
    /// `always_pad_to_max_batch` (default false).
    pub always_pad_to_max_batch: bool,
    /// Lazy state-buffer allocation; `None` reserves everything at load.
    pub lazy: Option<LazyAllocation>,
    /// `metric_logging_frequency_seconds` (0, the default, turns the logs off).
    pub metric_logging_seconds: u64,
    /// `logging_level` (default INFO).
    pub logging_level: LogLevel,
    /// `batch_info_logging_level` (default INFO).
    pub batch_info_level: LogLevel,
    /// `detailed_metrics_logging_level` (default VERBOSE).
    pub detailed_metrics_level: LogLevel,
    /// `compute_precision` is fp16 (`Some(true)`) or fp32; absent means fp16, the
    /// original's default. Only TensorRT honours it.
    pub fp16_compute: Option<bool>,
    /// `ort_ep`, when given.
    pub ort_ep: Option<ExecutionProvider>,
    /// `enable_cuda_graph` (TensorRT only).
    pub enable_cuda_graph: bool,
    /// `trt_cache_dir` when `enable_trt_caching` is 1 (TensorRT only).
    pub trt_cache_dir: Option<PathBuf>,
}

/// Parameters other backends' options that the stateful backend also honours (the ONNX
/// Runtime session options) or knowingly ignores.
const SESSION_KEYS: [&str; 3] = [
    "intra_op_thread_count",
    "inter_op_thread_count",
    "execution_mode",
];

const KNOWN_KEYS: [&str; 19] = [
    "state_pairs",
    "onnx_file_name",
    "max_candidate_sequence_use_ratio",
    "infer_end_requests",
    "store_states_as_fp16",
    "always_pad_to_max_batch",
    "initial_buffer_size",
    "subsequent_buffer_size",
    "buffer_alloc_threshold",
    "buffer_dealloc_threshold",
    "metric_logging_frequency_seconds",
    "logging_level",
    "batch_info_logging_level",
    "detailed_metrics_logging_level",
    "compute_precision",
    "ort_ep",
    "enable_cuda_graph",
    "enable_trt_caching",
    "trt_cache_dir",
];

const LAZY_KEYS: [&str; 4] = [
    "initial_buffer_size",
    "subsequent_buffer_size",
    "buffer_alloc_threshold",
    "buffer_dealloc_threshold",
];

/// Reads typed values of a model's `parameters`, with errors that name the key.
struct Reader<'a> {
    model: &'a str,
    parameters: &'a BTreeMap<String, String>,
}

impl Reader<'_> {
    fn raw(&self, key: &str) -> Option<&str> {
        self.parameters.get(key).map(|v| v.trim())
    }

    fn invalid(&self, key: &str, expected: &str) -> Error {
        Error::invalid_arg(format!(
            "model '{}': parameter '{key}' must be {expected}, got '{}'",
            self.model,
            self.raw(key).unwrap_or_default()
        ))
    }

    fn usize(&self, key: &str) -> Result<Option<usize>> {
        self.raw(key)
            .map(|v| {
                v.parse::<usize>()
                    .map_err(|_| self.invalid(key, "a non-negative integer"))
            })
            .transpose()
    }

    fn flag(&self, key: &str, default: bool) -> Result<bool> {
        match self.raw(key) {
            None => Ok(default),
            Some("0") => Ok(false),
            Some("1") => Ok(true),
            Some(_) => Err(self.invalid(key, "0 or 1")),
        }
    }

    fn level(&self, key: &str, default: LogLevel, allow_none: bool) -> Result<LogLevel> {
        match self.raw(key) {
            None => Ok(default),
            Some("NONE") if allow_none => Ok(LogLevel::None),
            Some("INFO") => Ok(LogLevel::Info),
            Some("VERBOSE") => Ok(LogLevel::Verbose),
            Some(_) if allow_none => Err(self.invalid(key, "NONE, INFO or VERBOSE")),
            Some(_) => Err(self.invalid(key, "INFO or VERBOSE")),
        }
    }
}

impl StatefulParams {
    /// Parses and checks the `parameters` of model `model`. Unknown keys are warned about.
    pub fn parse(model: &str, parameters: &BTreeMap<String, String>) -> Result<Self> {
        let r = Reader { model, parameters };
        warn_unknown(model, parameters);
        let state_pairs =
            parse_state_pairs(r.raw("state_pairs").unwrap_or_default()).map_err(|why| {
                Error::invalid_arg(format!("model '{model}': parameter 'state_pairs' {why}"))
            })?;
        let use_ratio = match r.raw("max_candidate_sequence_use_ratio") {
            None => 0.9,
            Some(v) => v
                .parse::<f64>()
                .ok()
                .filter(|x| *x > 0.0 && *x <= 1.0)
                .ok_or_else(|| {
                    r.invalid(
                        "max_candidate_sequence_use_ratio",
                        "a number greater than 0 and at most 1",
                    )
                })?,
        };
        let present: Vec<&str> = LAZY_KEYS
            .into_iter()
            .filter(|k| r.raw(k).is_some())
            .collect();
        let lazy = match present.len() {
            0 => None,
            4 => Some(LazyAllocation {
                initial: r.usize(LAZY_KEYS[0])?.unwrap_or_default(),
                subsequent: r.usize(LAZY_KEYS[1])?.unwrap_or_default(),
                alloc_threshold: r.usize(LAZY_KEYS[2])?.unwrap_or_default(),
                dealloc_threshold: r.usize(LAZY_KEYS[3])?.unwrap_or_default(),
            }),
            _ => {
                let missing: Vec<&str> = LAZY_KEYS
                    .into_iter()
                    .filter(|k| !present.contains(k))
                    .collect();
                return Err(Error::invalid_arg(format!(
                    "model '{model}': lazy state allocation needs all four of {} (missing: {})",
                    LAZY_KEYS.join(", "),
                    missing.join(", ")
                )));
            }
        };
        let fp16_compute = match r.raw("compute_precision") {
            None => None,
            Some("fp32") => Some(false),
            Some("fp16") => Some(true),
            Some(_) => return Err(r.invalid("compute_precision", "fp32 or fp16")),
        };
        let ort_ep = match r.raw("ort_ep") {
            None => None,
            Some("cpu") => Some(ExecutionProvider::Cpu),
            Some("cuda") => Some(ExecutionProvider::Cuda),
            Some("trt") => Some(ExecutionProvider::TensorRt),
            Some(_) => return Err(r.invalid("ort_ep", "cpu, cuda or trt")),
        };
        let trt_cache_dir = r
            .flag("enable_trt_caching", false)?
            .then(|| PathBuf::from(r.raw("trt_cache_dir").unwrap_or("/tmp")));
        Ok(Self {
            state_pairs,
            use_ratio,
            infer_end_requests: r.flag("infer_end_requests", true)?,
            store_states_as_fp16: r.flag("store_states_as_fp16", false)?,
            always_pad_to_max_batch: r.flag("always_pad_to_max_batch", false)?,
            lazy,
            metric_logging_seconds: r.usize("metric_logging_frequency_seconds")?.unwrap_or(0)
                as u64,
            logging_level: r.level("logging_level", LogLevel::Info, true)?,
            batch_info_level: r.level("batch_info_logging_level", LogLevel::Info, false)?,
            detailed_metrics_level: r.level(
                "detailed_metrics_logging_level",
                LogLevel::Verbose,
                false,
            )?,
            fp16_compute,
            ort_ep,
            enable_cuda_graph: r.flag("enable_cuda_graph", false)?,
            trt_cache_dir,
        })
    }
}

fn warn_unknown(model: &str, parameters: &BTreeMap<String, String>) {
    for key in parameters.keys() {
        if key == "error_inject_rate" {
            tracing::warn!(
                model = %model,
                "parameter 'error_inject_rate' is ignored: it only exists in debug builds of Triton's stateful backend"
            );
        } else if !KNOWN_KEYS.contains(&key.as_str()) && !SESSION_KEYS.contains(&key.as_str()) {
            tracing::warn!(model = %model, parameter = %key, "unknown parameter of the stateful backend, ignored");
        }
    }
}

/// Parses `<<<In_1, Out_1>>> <<<In_2, Out_2>>>`: each pair in three angle brackets, pairs
/// separated by white space. The error says what is wrong and where.
pub fn parse_state_pairs(text: &str) -> std::result::Result<Vec<StatePair>, String> {
    let mut pairs: Vec<StatePair> = Vec::new();
    let mut rest = text.trim_start();
    if rest.is_empty() {
        return Err(
            "is missing or empty: name the state tensors as <<<Input, Output>>> pairs".into(),
        );
    }
    while !rest.is_empty() {
        let at = text.len() - rest.len();
        let body = rest
            .strip_prefix("<<<")
            .ok_or_else(|| format!("expects '<<<' at character {at} of \"{text}\""))?;
        let end = body.find(">>>").ok_or_else(|| {
            format!("has no '>>>' closing the pair at character {at} of \"{text}\"")
        })?;
        let inner = &body[..end];
        let names: Vec<&str> = inner.split(',').map(str::trim).collect();
        let [input, output] = names[..] else {
            return Err(format!(
                "pair \"<<<{inner}>>>\" must hold exactly two names separated by ','"
            ));
        };
        for name in [input, output] {
            if name.is_empty() || name.contains(['<', '>']) || name.contains(char::is_whitespace) {
                return Err(format!(
                    "pair \"<<<{inner}>>>\" has an invalid tensor name \"{name}\""
                ));
            }
        }
        if pairs.iter().any(|p| {
            [&p.input, &p.output]
                .iter()
                .any(|n| *n == input || *n == output)
        }) {
            return Err(format!("names a tensor twice in \"<<<{inner}>>>\""));
        }
        pairs.push(StatePair {
            input: input.to_string(),
            output: output.to_string(),
        });
        let after = &body[end + 3..];
        let trimmed = after.trim_start();
        if !trimmed.is_empty() && trimmed.len() == after.len() {
            return Err(format!(
                "pairs must be separated by a space, at character {} of \"{text}\"",
                text.len() - after.len()
            ));
        }
        rest = trimmed;
    }
    Ok(pairs)
}

/// The sequences an instance may hold, `floor(max_candidate_sequences × ratio)`, and the
/// state-buffer plan for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Sequences an instance holds at most (after lazy allocation's rounding).
    pub max_sequences: usize,
    /// Sequences of the first buffer.
    pub initial: usize,
    /// Sequences of each further buffer.
    pub subsequent: usize,
    /// Buffers at most, the first included.
    pub max_buffers: usize,
}

impl StatefulParams {
    /// Plans the state buffers of one instance, with the original's checks.
    pub fn capacity(
        &self,
        model: &str,
        max_candidate_sequences: usize,
        max_batch_size: usize,
    ) -> Result<Capacity> {
        let max_connections = (max_candidate_sequences as f64 * self.use_ratio).floor() as usize;
        let fail = |message: &str| Error::invalid_arg(format!("model '{model}': {message}"));
        if max_connections == 0 {
            return Err(fail(
                "max_candidate_sequences × max_candidate_sequence_use_ratio leaves no sequence slot",
            ));
        }
        let Some(lazy) = self.lazy else {
            return Ok(Capacity {
                max_sequences: max_connections,
                initial: max_connections,
                subsequent: 0,
                max_buffers: 1,
            });
        };
        let batch = max_batch_size.max(1);
        if lazy.initial > max_connections {
            return Err(fail(&format!(
                "Initial buffer size cannot be larger than maximum allowed connections ({max_connections})."
            )));
        }
        if lazy.initial < batch {
            return Err(fail(
                "Initial buffer size must be larger than or equal to the max batch size.",
            ));
        }
        if lazy.subsequent < batch {
            return Err(fail(
                "Subsequent buffer size must be larger than or equal to the max batch size.",
            ));
        }
        if lazy.alloc_threshold < batch {
            return Err(fail(
                "Buffer allocation threshold size must be larger than or equal to the max batch size.",
            ));
        }
        if lazy.initial < lazy.alloc_threshold {
            return Err(fail(
                "Initial buffer size cannot be smaller than allocation threshold.",
            ));
        }
        if lazy.dealloc_threshold <= lazy.alloc_threshold {
            tracing::warn!(
                model,
                "buffer_dealloc_threshold ({}) is not above buffer_alloc_threshold ({}): state buffers may be allocated and released back and forth",
                lazy.dealloc_threshold,
                lazy.alloc_threshold
            );
        }
        let max_buffers = 1 + (max_connections - lazy.initial) / lazy.subsequent;
        Ok(Capacity {
            max_sequences: lazy.initial + (max_buffers - 1) * lazy.subsequent,
            initial: lazy.initial,
            subsequent: lazy.subsequent,
            max_buffers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(input: &str, output: &str) -> StatePair {
        StatePair {
            input: input.into(),
            output: output.into(),
        }
    }

    #[test]
    fn parses_the_seed_syntax() {
        assert_eq!(
            parse_state_pairs("<<<Accumulate_In, Accumulate_Out>>>"),
            Ok(vec![pair("Accumulate_In", "Accumulate_Out")])
        );
        assert_eq!(
            parse_state_pairs(" <<<A,B>>>  <<<C , D>>> "),
            Ok(vec![pair("A", "B"), pair("C", "D")])
        );
    }

    #[test]
    fn rejects_bad_syntax_with_the_place() {
        for (text, expected) in [
            ("", "missing or empty"),
            ("<<A, B>>>", "expects '<<<' at character 0"),
            ("<<<A, B>>", "no '>>>'"),
            ("<<<A>>>", "exactly two names"),
            ("<<<A, B, C>>>", "exactly two names"),
            ("<<<A, >>>", "invalid tensor name"),
            (
                "<<<A, B>>><<<C, D>>>",
                "separated by a space, at character 10",
            ),
            ("<<<A, B>>> x", "expects '<<<' at character 11"),
            ("<<<A, B>>> <<<B, C>>>", "names a tensor twice"),
        ] {
            let error = parse_state_pairs(text).expect_err(text);
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    fn params(extra: &[(&str, &str)]) -> Result<StatefulParams> {
        let parameters = [("state_pairs", "<<<A, B>>>")]
            .iter()
            .chain(extra)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        StatefulParams::parse("m", &parameters)
    }

    #[test]
    fn defaults_follow_the_original() {
        let p = params(&[]).expect("valid");
        assert_eq!(p.use_ratio, 0.9);
        assert!(p.infer_end_requests);
        assert!(!p.store_states_as_fp16);
        assert_eq!(p.logging_level, LogLevel::Info);
        assert_eq!(p.detailed_metrics_level, LogLevel::Verbose);
        assert_eq!(p.lazy, None);
        let c = p.capacity("m", 1280, 16).expect("capacity");
        assert_eq!((c.max_sequences, c.max_buffers), (1152, 1));
    }

    #[test]
    fn lazy_allocation_needs_all_four_and_rounds_the_capacity() {
        let lazy = [
            ("initial_buffer_size", "512"),
            ("subsequent_buffer_size", "100"),
            ("buffer_alloc_threshold", "32"),
            ("buffer_dealloc_threshold", "200"),
        ];
        let p = params(&lazy).expect("valid");
        let c = p.capacity("m", 1280, 16).expect("capacity");
        // 1152 allowed: 512 + 6 × 100 = 1112 in 7 buffers.
        assert_eq!(
            c,
            Capacity {
                max_sequences: 1112,
                initial: 512,
                subsequent: 100,
                max_buffers: 7
            }
        );
        let error = params(&lazy[..3]).expect_err("three of four");
        assert!(error
            .message()
            .contains("missing: buffer_dealloc_threshold"));
    }

    #[test]
    fn lazy_allocation_checks_the_sizes() {
        let with = |initial: &str, subsequent: &str, alloc: &str| {
            params(&[
                ("initial_buffer_size", initial),
                ("subsequent_buffer_size", subsequent),
                ("buffer_alloc_threshold", alloc),
                ("buffer_dealloc_threshold", "200"),
            ])
            .expect("parses")
            .capacity("m", 100, 16)
            .expect_err("invalid")
            .message()
            .to_string()
        };
        assert!(with("200", "16", "16").contains("cannot be larger than maximum"));
        assert!(with("8", "16", "8").contains("Initial buffer size must be larger"));
        assert!(with("32", "8", "16").contains("Subsequent buffer size must be"));
        assert!(with("32", "16", "8").contains("allocation threshold size must be"));
        assert!(with("32", "16", "40").contains("cannot be smaller than allocation threshold"));
    }

    #[test]
    fn rejects_bad_values() {
        for (key, value) in [
            ("max_candidate_sequence_use_ratio", "0"),
            ("max_candidate_sequence_use_ratio", "1.5"),
            ("infer_end_requests", "yes"),
            ("logging_level", "DEBUG"),
            ("batch_info_logging_level", "NONE"),
            ("compute_precision", "int8"),
            ("ort_ep", "rocm"),
            ("initial_buffer_size", "-1"),
        ] {
            let mut extra = vec![(key, value)];
            if key == "initial_buffer_size" {
                extra.extend([
                    ("subsequent_buffer_size", "1"),
                    ("buffer_alloc_threshold", "1"),
                    ("buffer_dealloc_threshold", "1"),
                ]);
            }
            let error = params(&extra).expect_err(key);
            assert!(error.message().contains(key), "{}", error.message());
        }
    }
}
