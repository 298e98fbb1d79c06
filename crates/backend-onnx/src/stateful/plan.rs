//! What a stateful model is, checked once at load against its ONNX graph: how each client
//! tensor and each state tensor is batched, and the boolean reset input driven by the
//! sequence START. Instances share one plan.

use nereid_core::model::{over_limit, ModelSpec, SequenceStrategy, MAX_STATE_BYTES};
use nereid_core::{DataType, Error, Result};

use super::layout::{BatchAxis, Codec};
use super::params::{Capacity, StatefulParams};
use crate::autocomplete::ModelTensor;

/// The largest state buffer of one instance, in bytes: the sequences of one buffer (all
/// of them without lazy allocation, `initial_buffer_size` or `subsequent_buffer_size`
/// with it, and a full batch, which an execution gathers) times the state of one
/// sequence. The eager buffer is allocated and its pages touched at load, so this is
/// memory really taken. The original backend keeps its buffers in GPU memory (80 GiB on
/// the largest GPUs); 16 GiB of host memory per buffer holds any of its real
/// configurations, and beyond it a mistaken `max_candidate_sequences` fails the load
/// with this message rather than by the kernel's out-of-memory killer.
pub const MAX_STATE_BUFFER_BYTES: usize = 16 << 30;

/// A client-visible input or output.
#[derive(Debug, Clone)]
pub struct ClientTensor {
    /// Its name.
    pub name: String,
    /// Its element type.
    pub datatype: DataType,
    /// The configured dims with -1 at the batch axis (Triton's batch dimension not
    /// included).
    pub dims: Vec<i64>,
    /// Position of the batch axis in the client's shape (after Triton's batch dimension).
    pub client_axis: usize,
    /// The batch axis in bytes.
    pub axis: BatchAxis,
    /// Whether the ONNX tensor has an extra leading batch dimension the config leaves to
    /// `max_batch_size` (no -1 in the dims).
    pub leading_batch: bool,
}

impl ClientTensor {
    /// The ONNX shape for a batch of `rows`.
    pub fn onnx_shape(&self, rows: usize) -> Vec<i64> {
        let mut shape = Vec::with_capacity(self.dims.len() + 1);
        if self.leading_batch {
            shape.push(rows as i64);
        }
        shape.extend(
            self.dims
                .iter()
                .map(|&d| if d < 0 { rows as i64 } else { d }),
        );
        shape
    }

    /// The shape a client sees for one request with `rows` on the batch axis (1, or 0
    /// for an END answered without running the model).
    pub fn client_shape(&self, rows: i64, triton_batch: bool) -> Vec<i64> {
        let mut shape = Vec::with_capacity(self.dims.len() + 1);
        if self.leading_batch {
            // Triton's batch dimension is the batch axis itself.
            shape.push(rows);
        } else if triton_batch {
            shape.push(1);
        }
        shape.extend(self.dims.iter().map(|&d| if d < 0 { rows } else { d }));
        shape
    }
}

/// One state pair, as stored.
#[derive(Debug, Clone)]
pub struct StateTensor {
    /// The ONNX input fed with the stored state.
    pub input: String,
    /// The ONNX output that replaces it.
    pub output: String,
    /// Its element type in the model.
    pub datatype: DataType,
    /// ONNX dims, -1 at the batch axis.
    pub dims: Vec<i64>,
    /// The batch axis in bytes.
    pub axis: BatchAxis,
    /// How it is stored.
    pub codec: Codec,
}

impl StateTensor {
    /// ONNX shape for `rows` sequences.
    pub fn shape(&self, rows: usize) -> Vec<i64> {
        self.dims
            .iter()
            .map(|&d| if d < 0 { rows as i64 } else { d })
            .collect()
    }

    /// Bytes one sequence's state takes in store.
    pub fn stored_bytes(&self) -> usize {
        self.codec.stored_len(self.axis.row_bytes())
    }
}

/// The boolean input reset at a sequence start (the START control's tensor name).
#[derive(Debug, Clone)]
pub struct ResetInput {
    /// Its name.
    pub name: String,
    /// ONNX dims after the leading batch dimension.
    pub trailing: Vec<i64>,
}

impl ResetInput {
    /// Values per sequence.
    pub fn row_len(&self) -> usize {
        self.trailing.iter().map(|&d| d.max(1) as usize).product()
    }
}

/// Everything an instance needs to batch, run and keep state.
#[derive(Debug)]
pub struct Plan {
    /// Model name.
    pub model: String,
    /// Client inputs, in config order.
    pub inputs: Vec<ClientTensor>,
    /// Client outputs, in config order.
    pub outputs: Vec<ClientTensor>,
    /// State pairs.
    pub states: Vec<StateTensor>,
    /// The reset input.
    pub reset: ResetInput,
    /// Whether requests carry Triton's batch dimension (`max_batch_size` > 0).
    pub triton_batch: bool,
    /// Largest batch (rows) an execution takes.
    pub max_batch: usize,
    /// The parameters.
    pub params: StatefulParams,
    /// Sequences per instance and the buffer plan.
    pub capacity: Capacity,
}

impl Plan {
    /// Rows an execution of `sequences` sequences runs (`always_pad_to_max_batch` pads).
    pub fn rows_run(&self, sequences: usize) -> usize {
        if self.params.always_pad_to_max_batch {
            self.max_batch.max(sequences)
        } else {
            sequences
        }
    }
}

fn model_error(model: &str, message: String) -> Error {
    Error::invalid_arg(format!("stateful model '{model}': {message}"))
}

impl Plan {
    /// Checks `spec` and `params` against the ONNX model's `inputs` and `outputs`.
    pub fn new(
        spec: &ModelSpec,
        params: StatefulParams,
        onnx_inputs: &[ModelTensor],
        onnx_outputs: &[ModelTensor],
    ) -> Result<Self> {
        let model = spec.name.as_str();
        let fail = |message: String| model_error(model, message);
        // The backend reads request tensors in their client layout and batches them
        // along axes found from `dims`; a `reshape` would need both redone.
        if let Some(t) = spec
            .inputs
            .iter()
            .chain(&spec.outputs)
            .find(|t| t.reshape.is_some())
        {
            return Err(Error::unsupported(format!(
                "stateful model '{model}': tensor '{}' has a reshape, which the stateful backend does not support",
                t.name
            )));
        }
        let Some(sequence) = spec.scheduling.sequence() else {
            return Err(fail(
                "the stateful backend needs sequence_batching with the oldest strategy".into(),
            ));
        };
        let SequenceStrategy::Oldest {
            max_candidate_sequences: candidates,
            ..
        } = sequence.strategy
        else {
            return Err(fail(
                "the stateful backend supports only the oldest sequence batching strategy (sequence_batching { oldest { ... } })".into(),
            ));
        };
        let max_batch = spec.max_batch_size.max(1);
        let capacity = params.capacity(model, candidates, spec.max_batch_size)?;
        let triton_batch = spec.max_batch_size > 0;
        let find = |list: &'_ [ModelTensor], name: &str, what: &str| {
            list.iter()
                .find(|t| t.name == name)
                .cloned()
                .ok_or_else(|| fail(format!("the ONNX model has no {what} named '{name}'")))
        };
        let client = |t: &nereid_core::model::TensorSpec, onnx: &ModelTensor| {
            client_tensor(model, t, onnx, triton_batch)
        };
        let inputs = spec
            .inputs
            .iter()
            .map(|t| client(t, &find(onnx_inputs, &t.name, "input")?))
            .collect::<Result<Vec<_>>>()?;
        let outputs = spec
            .outputs
            .iter()
            .map(|t| client(t, &find(onnx_outputs, &t.name, "output")?))
            .collect::<Result<Vec<_>>>()?;
        let codec = if params.store_states_as_fp16 {
            Codec::Fp16
        } else {
            Codec::Raw
        };
        let states = params
            .state_pairs
            .iter()
            .map(|pair| {
                let input = find(onnx_inputs, &pair.input, "state input")?;
                let output = find(onnx_outputs, &pair.output, "state output")?;
                state_tensor(model, &input, &output, codec)
            })
            .collect::<Result<Vec<_>>>()?;
        let start = sequence
            .controls
            .start
            .as_ref()
            .map(|c| c.name.clone())
            .ok_or_else(|| {
                fail("map CONTROL_SEQUENCE_START to the model's boolean reset input (e.g. ResetSequence) in sequence_batching.control_input".into())
            })?;
        let reset = reset_input(model, &find(onnx_inputs, &start, "reset input")?)?;
        check_buffers(model, &params, &capacity, max_batch, &states)?;
        Ok(Self {
            model: model.to_string(),
            inputs,
            outputs,
            states,
            reset,
            triton_batch,
            max_batch,
            params,
            capacity,
        })
    }
}

/// Fails when one state buffer (see [`MAX_STATE_BUFFER_BYTES`]) would be too large.
fn check_buffers(
    model: &str,
    params: &StatefulParams,
    capacity: &Capacity,
    max_batch: usize,
    states: &[StateTensor],
) -> Result<()> {
    // Each state is at most MAX_STATE_BYTES (checked by `state_tensor`): no overflow.
    let per_sequence: usize = states.iter().map(StateTensor::stored_bytes).sum();
    let first = if params.lazy.is_some() {
        "initial_buffer_size"
    } else {
        "max_candidate_sequences × max_candidate_sequence_use_ratio"
    };
    // A later buffer is only ever allocated when the plan allows more than one.
    let later = if capacity.max_buffers > 1 {
        capacity.subsequent
    } else {
        0
    };
    let candidates = [
        (first, capacity.initial),
        ("subsequent_buffer_size", later),
        ("max_batch_size", max_batch),
    ];
    for (field, sequences) in candidates {
        let bytes = sequences.checked_mul(per_sequence);
        if bytes.is_none_or(|b| b > MAX_STATE_BUFFER_BYTES) {
            return Err(over_limit(
                model,
                &format!("state buffer ({field} × state bytes per sequence)"),
                format!(
                    "{sequences} × {per_sequence} = {}",
                    bytes.map_or("more than 2^64".to_string(), |b| b.to_string())
                ),
                format!("{MAX_STATE_BUFFER_BYTES} bytes"),
            ));
        }
    }
    Ok(())
}

/// A config tensor, checked against its ONNX tensor.
fn client_tensor(
    model: &str,
    t: &nereid_core::model::TensorSpec,
    onnx: &ModelTensor,
    triton_batch: bool,
) -> Result<ClientTensor> {
    let fail = |message: String| model_error(model, message);
    let size = t.datatype.element_size().ok_or_else(|| {
        fail(format!(
            "tensor '{}' is {}; the stateful backend batches fixed-size types only",
            t.name, t.datatype
        ))
    })?;
    if t.datatype != onnx.datatype {
        return Err(fail(format!(
            "tensor '{}' is {} in the config but {} in the ONNX model",
            t.name, t.datatype, onnx.datatype
        )));
    }
    let marked: Vec<usize> = (0..t.dims.len()).filter(|&i| t.dims[i] < 0).collect();
    let (onnx_dims, onnx_axis, client_axis, leading_batch) = match marked[..] {
        [axis] => (
            t.dims.clone(),
            axis,
            axis + usize::from(triton_batch),
            false,
        ),
        [] if triton_batch => {
            let mut dims = vec![-1];
            dims.extend(&t.dims);
            (dims, 0, 0, true)
        }
        [] => {
            return Err(fail(format!(
                "tensor '{}' has no batch dimension: mark it -1 in dims, or set max_batch_size",
                t.name
            )))
        }
        _ => {
            return Err(fail(format!(
            "tensor '{}' has more than one dimension marked -1; only the batch dimension may vary",
            t.name
        )))
        }
    };
    let matches = onnx.dims.len() == onnx_dims.len()
        && onnx
            .dims
            .iter()
            .zip(&onnx_dims)
            .all(|(&o, &c)| o < 0 || c < 0 || o == c);
    if !matches {
        return Err(fail(format!(
            "tensor '{}' has dims {:?} in the ONNX model, which do not match {:?} from the config",
            t.name, onnx.dims, onnx_dims
        )));
    }
    Ok(ClientTensor {
        name: t.name.clone(),
        datatype: t.datatype,
        axis: BatchAxis::new(&onnx_dims, onnx_axis, size),
        dims: t.dims.clone(),
        client_axis,
        leading_batch,
    })
}

/// A state pair, checked: same type and shape both ways, one dynamic (batch) dimension.
fn state_tensor(
    model: &str,
    input: &ModelTensor,
    output: &ModelTensor,
    codec: Codec,
) -> Result<StateTensor> {
    let fail = |message: String| model_error(model, message);
    if input.datatype != output.datatype || input.dims != output.dims {
        return Err(fail(format!(
            "state pair '{}' ({} {:?}) and '{}' ({} {:?}) must have the same type and shape",
            input.name, input.datatype, input.dims, output.name, output.datatype, output.dims
        )));
    }
    let dynamic: Vec<usize> = (0..input.dims.len())
        .filter(|&i| input.dims[i] < 0)
        .collect();
    let axis = match dynamic[..] {
        [axis] => axis,
        [] => {
            return Err(fail(format!(
                "No dynamic dimension in the ONNX model for state tensor '{}': its batch dimension must be dynamic",
                input.name
            )))
        }
        _ => {
            return Err(fail(format!(
                "state tensor '{}' has {} dynamic dimensions; only its batch dimension may be dynamic",
                input.name,
                dynamic.len()
            )))
        }
    };
    let size = input.datatype.element_size().ok_or_else(|| {
        fail(format!(
            "state tensor '{}' is {}; states must have a fixed-size type",
            input.name, input.datatype
        ))
    })?;
    let row_bytes = input
        .dims
        .iter()
        .filter(|&&d| d >= 0)
        .try_fold(size, |bytes, &d| bytes.checked_mul(d as usize))
        .filter(|&b| b <= MAX_STATE_BYTES);
    if row_bytes.is_none() {
        return Err(fail(format!(
            "state tensor '{}' of dims {:?} holds more than the limit of {MAX_STATE_BYTES} bytes per sequence",
            input.name, input.dims
        )));
    }
    if codec == Codec::Fp16 && input.datatype != DataType::Fp32 {
        return Err(fail(format!(
            "store_states_as_fp16 needs FP32 states, but '{}' is {}",
            input.name, input.datatype
        )));
    }
    Ok(StateTensor {
        input: input.name.clone(),
        output: output.name.clone(),
        datatype: input.datatype,
        axis: BatchAxis::new(&input.dims, axis, size),
        dims: input.dims.clone(),
        codec,
    })
}

/// The reset input: BOOL with its batch dimension first.
fn reset_input(model: &str, onnx: &ModelTensor) -> Result<ResetInput> {
    let fail = |message: String| model_error(model, message);
    if onnx.datatype != DataType::Bool {
        return Err(fail(format!(
            "The model should include a BOOL '{}' tensor to reset the state at a sequence start (it is {})",
            onnx.name, onnx.datatype
        )));
    }
    match onnx.dims.split_first() {
        Some((&first, rest)) if first < 0 && rest.iter().all(|&d| d >= 0) => Ok(ResetInput {
            name: onnx.name.clone(),
            trailing: rest.to_vec(),
        }),
        _ => Err(fail(format!(
            "Batch dimension should always be the first dimension for reset tensor '{}' (ONNX dims {:?})",
            onnx.name, onnx.dims
        ))),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn tensor(name: &str, dims: &[i64]) -> ModelTensor {
        ModelTensor {
            name: name.into(),
            datatype: DataType::Fp32,
            dims: dims.to_vec(),
        }
    }

    fn state(dims: &[i64]) -> Result<StateTensor> {
        state_tensor(
            "m",
            &tensor("S_IN", dims),
            &tensor("S_OUT", dims),
            Codec::Raw,
        )
    }

    fn params(lazy: bool) -> StatefulParams {
        let mut parameters: BTreeMap<String, String> =
            [("state_pairs".to_string(), "<<<S_IN, S_OUT>>>".to_string())].into();
        if lazy {
            for key in [
                "initial_buffer_size",
                "subsequent_buffer_size",
                "buffer_alloc_threshold",
                "buffer_dealloc_threshold",
            ] {
                parameters.insert(key.into(), "1".into());
            }
        }
        StatefulParams::parse("m", &parameters).expect("valid")
    }

    fn capacity(initial: usize, subsequent: usize, max_buffers: usize) -> Capacity {
        Capacity {
            max_sequences: initial + subsequent * (max_buffers - 1),
            initial,
            subsequent,
            max_buffers,
        }
    }

    #[test]
    fn a_reshape_is_refused() {
        use nereid_core::config::{normalize_and_validate, parse_model_config, NormalizeOptions};
        let text = r#"backend: "stateful" max_batch_size: 1
            input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]
            output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
            sequence_batching { oldest { max_candidate_sequences: 1 } }"#;
        let mut config =
            parse_model_config(std::path::Path::new("config.pbtxt"), text).expect("parses");
        normalize_and_validate(&mut config, "m", NormalizeOptions::default()).expect("valid");
        let spec = ModelSpec::new(config, 1).expect("builds");
        let err = Plan::new(&spec, params(false), &[], &[]).expect_err("refused");
        assert_eq!(err.kind(), nereid_core::ErrorKind::Unsupported);
        assert_eq!(
            err.message(),
            "stateful model 'm': tensor 'x' has a reshape, which the stateful backend does not support"
        );
    }

    #[test]
    fn a_state_of_one_sequence_is_bounded_without_overflow() {
        state(&[-1, 1 << 28]).expect("exactly 1 GiB");
        for dims in [[-1, 1 << 28, 2], [-1, i64::MAX, 4]] {
            let error = state(&dims).expect_err("too large").message().to_string();
            assert!(
                error.contains("more than the limit of 1073741824 bytes per sequence"),
                "{error}"
            );
        }
    }

    #[test]
    fn every_state_buffer_is_bounded() {
        // 256 KiB per sequence: 65536 sequences make exactly 16 GiB.
        let states = [state(&[-1, 65536]).expect("small")];
        let check = |lazy, capacity, batch| {
            check_buffers("m", &params(lazy), &capacity, batch, &states)
                .map_err(|e| e.message().to_string())
        };
        assert_eq!(check(false, capacity(65536, 0, 1), 16), Ok(()));
        assert_eq!(
            check(false, capacity(65537, 0, 1), 16),
            Err("model 'm': state buffer (max_candidate_sequences × max_candidate_sequence_use_ratio × state bytes per sequence) 65537 × 262144 = 17180131328 exceeds the limit of 17179869184 bytes".into())
        );
        let lazy = check(true, capacity(1024, 1 << 20, 2), 16).expect_err("subsequent");
        assert!(lazy.contains("(subsequent_buffer_size × state"), "{lazy}");
        // A subsequent size that never gets allocated is not held against the model.
        assert_eq!(check(true, capacity(1024, 1 << 20, 1), 16), Ok(()));
        let batch = check(true, capacity(1024, 1024, 2), 1 << 20).expect_err("batch");
        assert!(batch.contains("(max_batch_size × state"), "{batch}");
    }
}
