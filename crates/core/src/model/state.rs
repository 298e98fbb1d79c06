//! Implicit state tensors (`sequence_batching { state [...] }`) as the model declares
//! them, with `initial_state` checked with Triton's load-time messages. Reading a data
//! file and keeping state per sequence is the sequence batcher's job.

use nereid_proto::inference::model_sequence_batching::initial_state::StateData;
use nereid_proto::inference::model_sequence_batching::State;

use super::{over_limit, TensorSpec};
use crate::error::{Error, Result};
use crate::request::element_count;
use nereid_proto::DataType;

/// The largest state tensor of one sequence, in bytes: the initial value the sequence
/// batcher allocates (and reads from a data file) at load, and each state the stateful
/// backend keeps per sequence. Implicit state is a model's memory between requests
/// (recurrent state, a small cache); a gibibyte per sequence is far beyond that, and
/// below it an allocation is still an ordinary one that fails cleanly.
pub const MAX_STATE_BYTES: usize = 1 << 30;

/// One state tensor pair: fed to the model as `input_name`, read back from `output_name`.
#[derive(Debug, Clone, PartialEq)]
pub struct StateSpec {
    /// The model input the state is fed to.
    pub input_name: String,
    /// The model output the next state is read from.
    pub output_name: String,
    /// Element type of both.
    pub datatype: DataType,
    /// Dimensions without the batch dimension; -1 is variable.
    pub dims: Vec<i64>,
    /// What a sequence starts from.
    pub initial: InitialState,
    /// Byte length of the initial value (a 4-byte zero length per element for BYTES),
    /// at most [`MAX_STATE_BYTES`].
    pub initial_bytes: usize,
    /// `use_same_buffer_for_input_output`: a backend library is handed one buffer as the
    /// state input and the state it writes, and may update it in place.
    pub same_buffer: bool,
}

/// The value of a state at a sequence's START.
#[derive(Debug, Clone, PartialEq)]
pub enum InitialState {
    /// Zeros (empty strings for BYTES) of this shape: `initial_state.dims`, or `dims` with
    /// -1 read as 1.
    Zeros(Vec<i64>),
    /// The bytes of `<model dir>/initial_state/<file>`, of this shape.
    DataFile {
        /// Shape of the initial value.
        dims: Vec<i64>,
        /// File name under the model's `initial_state` folder.
        file: String,
    },
}

impl StateSpec {
    /// Reads and checks entry `index` of model `model`'s `state` list.
    pub(super) fn from_config(state: &State, model: &str, index: usize) -> Result<Self> {
        let name = &state.input_name;
        let datatype = nereid_proto::inference::DataType::try_from(state.data_type)
            .ok()
            .and_then(DataType::from_config)
            .ok_or_else(|| {
                Error::invalid_arg(format!("state '{name}' has an unsupported data type"))
            })?;
        let initial = initial_state(state)?;
        let dims = initial.dims();
        let bytes =
            element_count(dims).and_then(|n| n.checked_mul(datatype.element_size().unwrap_or(4)));
        let initial_bytes = bytes.filter(|&n| n <= MAX_STATE_BYTES).ok_or_else(|| {
            let field = if state.initial_state.is_empty() {
                format!("sequence_batching.state[{index}].dims")
            } else {
                format!("sequence_batching.state[{index}].initial_state.dims")
            };
            let bytes = bytes.map_or("more than 2^64 bytes".to_string(), |n| format!("{n} bytes"));
            over_limit(
                model,
                &field,
                format!("{dims:?} ({bytes} of {datatype})"),
                format!("{MAX_STATE_BYTES} bytes"),
            )
        })?;
        Ok(Self {
            input_name: name.clone(),
            output_name: state.output_name.clone(),
            datatype,
            dims: state.dims.clone(),
            initial,
            initial_bytes,
            same_buffer: state.use_same_buffer_for_input_output,
        })
    }

    /// The state's model input and output, as tensors the backend feeds and reads
    /// (clients never see them).
    pub fn tensor_specs(&self) -> (TensorSpec, TensorSpec) {
        (
            TensorSpec::internal(&self.input_name, self.datatype, self.dims.clone()),
            TensorSpec::internal(&self.output_name, self.datatype, self.dims.clone()),
        )
    }
}

impl InitialState {
    /// Shape of the initial value.
    pub fn dims(&self) -> &[i64] {
        match self {
            InitialState::Zeros(dims) | InitialState::DataFile { dims, .. } => dims,
        }
    }
}

fn initial_state(state: &State) -> Result<InitialState> {
    let name = &state.input_name;
    if state.initial_state.len() > 1 {
        return Err(Error::invalid_arg(format!(
            "initial_state field for state input '{name}' must contain exactly one or zero element. Found '{}' elements.",
            state.initial_state.len()
        )));
    }
    let Some(initial) = state.initial_state.first() else {
        return Ok(InitialState::Zeros(
            state.dims.iter().map(|d| (*d).max(1)).collect(),
        ));
    };
    if initial.name.is_empty() {
        return Err(Error::invalid_arg(format!(
            "Field 'name' must be set when using initial_state for state input '{name}'."
        )));
    }
    if initial.data_type != state.data_type {
        return Err(Error::invalid_arg(format!(
            "The data type used for 'initial_state' field of state '{name}' does not match the state data type."
        )));
    }
    if initial.dims.iter().any(|d| *d < 0) || initial.dims.len() != state.dims.len() {
        return Err(Error::invalid_arg(format!(
            "'initial_state' of state '{name}' must have the state's rank and no variable (-1) dimensions"
        )));
    }
    Ok(match &initial.state_data {
        Some(StateData::DataFile(file)) => InitialState::DataFile {
            dims: initial.dims.clone(),
            file: file.clone(),
        },
        _ => InitialState::Zeros(initial.dims.clone()),
    })
}
