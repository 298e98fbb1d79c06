//! Inference requests and responses as the core sees them: frontend-neutral, with tensor
//! data held as `Bytes` so that frontends can hand over slices of their buffers unchanged.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use bytes::Bytes;

use crate::error::Result;
use crate::shm::DeviceSpan;
use crate::trace::{RequestTrace, TensorActivity};
use nereid_proto::DataType;

/// A request or response parameter value (the KServe v2 `parameters` map).
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    /// `true` / `false`.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer too large for `Int`.
    Uint(u64),
    /// A floating-point number.
    Double(f64),
    /// A string.
    String(String),
}

/// Ordered name/value parameters; small, so a vector beats a map.
pub type Parameters = Vec<(String, ParamValue)>;

/// Outputs requested as their top classes: output name and class count, in request order.
pub type Classifications = Vec<(String, u32)>;

/// One input tensor: its declared shape and type and its raw little-endian bytes
/// (for `BYTES`, each element as a 4-byte length followed by its bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct InputTensor {
    /// Input name as in the model configuration.
    pub name: String,
    /// Element type the client declared.
    pub datatype: DataType,
    /// Shape the client declared, including the batch dimension when the model batches.
    pub shape: Vec<i64>,
    /// The tensor's bytes (empty while they are on a GPU, see `device`).
    pub data: Bytes,
    /// Where the bytes are instead of `data`: a window of a CUDA shared-memory region,
    /// kept there for a model whose backend reads GPU memory (every other model gets them
    /// copied into `data` when the request is admitted).
    pub device: Option<DeviceSpan>,
}

impl InputTensor {
    /// The tensor's size in bytes, wherever they are.
    pub fn byte_size(&self) -> usize {
        self.device
            .as_ref()
            .map_or(self.data.len(), DeviceSpan::len)
    }

    /// Copies bytes left on a GPU into `data`, so that the tensor is host memory.
    pub fn to_host(&mut self) -> Result<()> {
        if let Some(span) = self.device.take() {
            self.data = span.read()?;
        }
        Ok(())
    }
}

/// One output tensor of a response.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputTensor {
    /// Output name as in the model configuration.
    pub name: String,
    /// Element type.
    pub datatype: DataType,
    /// Shape, including the batch dimension when the model batches.
    pub shape: Vec<i64>,
    /// The tensor's bytes, in the same encoding as [`InputTensor::data`] (empty while
    /// they are on a GPU, see `device`).
    pub data: Bytes,
    /// Where the bytes are instead of `data`: the window of the CUDA shared-memory region
    /// the client asked for, which a GPU backend wrote itself (Triton hands a backend the
    /// output's region as its buffer); the frontend then has nothing to copy.
    pub device: Option<DeviceSpan>,
}

impl OutputTensor {
    /// The tensor's bytes in host memory: `data`, or a copy of what is on the GPU.
    pub fn host_data(&self) -> Result<Bytes> {
        match &self.device {
            Some(span) => span.read(),
            None => Ok(self.data.clone()),
        }
    }
}

/// A response's output tensors, shared rather than copied: a response-cache hit answers
/// with the very list the cache holds, where a copy cost five allocations and their frees
/// per request. Reads go through to the list; a write first copies a list someone else
/// still holds (copy on write), so no holder ever sees another's change.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outputs(Arc<Vec<OutputTensor>>);

impl Outputs {
    /// The list, shared with this response, for a cache to keep.
    pub fn shared(&self) -> Arc<Vec<OutputTensor>> {
        self.0.clone()
    }

    /// The list as a `Vec`: taken when no one else holds it, copied otherwise.
    pub fn into_vec(self) -> Vec<OutputTensor> {
        Arc::unwrap_or_clone(self.0)
    }
}

impl Deref for Outputs {
    type Target = Vec<OutputTensor>;

    fn deref(&self) -> &Vec<OutputTensor> {
        &self.0
    }
}

impl DerefMut for Outputs {
    fn deref_mut(&mut self) -> &mut Vec<OutputTensor> {
        Arc::make_mut(&mut self.0)
    }
}

impl From<Vec<OutputTensor>> for Outputs {
    fn from(outputs: Vec<OutputTensor>) -> Self {
        Self(Arc::new(outputs))
    }
}

impl From<Arc<Vec<OutputTensor>>> for Outputs {
    fn from(outputs: Arc<Vec<OutputTensor>>) -> Self {
        Self(outputs)
    }
}

impl FromIterator<OutputTensor> for Outputs {
    fn from_iter<I: IntoIterator<Item = OutputTensor>>(outputs: I) -> Self {
        Self(Arc::new(outputs.into_iter().collect()))
    }
}

impl<'a> IntoIterator for &'a Outputs {
    type Item = &'a OutputTensor;
    type IntoIter = std::slice::Iter<'a, OutputTensor>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl IntoIterator for Outputs {
    type Item = OutputTensor;
    type IntoIter = std::vec::IntoIter<OutputTensor>;

    fn into_iter(self) -> Self::IntoIter {
        self.into_vec().into_iter()
    }
}

/// An inference request after frontend decoding.
#[derive(Debug, Clone, Default)]
pub struct InferRequest {
    /// Target model.
    pub model_name: String,
    /// Target version; `None` means the highest ready version.
    pub model_version: Option<i64>,
    /// Client-chosen request id, echoed in the response (empty when not given).
    pub id: String,
    /// Request parameters other than the ones the frontends consume themselves.
    pub parameters: Parameters,
    /// Input tensors.
    pub inputs: Vec<InputTensor>,
    /// Names of the outputs to return; `None` returns every output.
    pub requested_outputs: Option<Vec<String>>,
    /// Requested outputs to return as their top classes (the classification extension):
    /// output name and class count. The server facade applies them to the response (see
    /// [`crate::classification`]); models and the response cache never see them.
    pub classification: Classifications,
    /// The request's trace when it was sampled (the trace extension); `None` otherwise.
    pub trace: Option<crate::trace::RequestTrace>,
    /// Who answers a backend asking where an output will go before it allocates it
    /// (see [`crate::output_query`]); `None`: nobody, the properties are not available.
    pub output_query: Option<std::sync::Arc<dyn crate::output_query::OutputQuery>>,
}

/// A successful inference response.
#[derive(Debug, Clone, PartialEq)]
pub struct InferResponse {
    /// Model that answered.
    pub model_name: String,
    /// Version that answered.
    pub model_version: i64,
    /// Echo of the request id (empty when the request had none).
    pub id: String,
    /// Response parameters.
    pub parameters: Parameters,
    /// Output tensors, in the order they were requested (model order when all).
    pub outputs: Outputs,
}

/// The answer to a submitted request, still to come.
pub type Answer =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<InferResponse>> + Send>>;

/// The answer of a request refused before it was issued: `error`, at once.
pub fn refused(error: crate::error::Error) -> Answer {
    Box::pin(std::future::ready(Err(error)))
}

/// Triton's verbose line for a request refused when its frontend issued it (an unknown
/// model, validation, a full queue), which its HTTP and gRPC frontends write:
/// `[request id: <id>] Infer failed: <message>`, `<id_unknown>` for a request without an
/// id. L0_logging's injection tests look for a forged input name in it.
pub fn log_refused(id: &str, error: &crate::error::Error) {
    let id = if id.is_empty() { "<id_unknown>" } else { id };
    tracing::debug!("[request id: {id}] Infer failed: {}", error.message());
}

/// The id of a request about to be issued, kept only while verbose logging is on (for
/// [`log_refused`]); `None` costs nothing otherwise.
pub fn id_for_log(id: &str) -> Option<String> {
    tracing::enabled!(tracing::Level::DEBUG).then(|| id.to_string())
}

impl InferRequest {
    /// The request's parameter called `name`, if present.
    pub fn parameter(&self, name: &str) -> Option<&ParamValue> {
        self.parameters
            .iter()
            .find_map(|(k, v)| (k == name).then_some(v))
    }

    /// Sets parameter `name` to `value`, replacing any value it had.
    pub fn set_parameter(&mut self, name: &str, value: ParamValue) {
        match self.parameters.iter_mut().find(|(k, _)| k == name) {
            Some((_, old)) => *old = value,
            None => self.parameters.push((name.to_string(), value)),
        }
    }

    /// The parameter `name` as a non-negative integer, if it is one.
    pub fn u64_parameter(&self, name: &str) -> Option<u64> {
        match self.parameter(name)? {
            ParamValue::Int(i) => u64::try_from(*i).ok(),
            ParamValue::Uint(u) => Some(*u),
            _ => None,
        }
    }
}

/// Keeps the `wanted` outputs in the wanted order (all of them, in model order, when
/// `None`). A wanted output the model did not produce is left out, as Triton's response
/// holds only what the backend produced: an ensemble passes it on as an absent tensor
/// (an optional input left out downstream).
pub fn select_outputs(outputs: impl Into<Outputs>, wanted: Option<&[String]>) -> Outputs {
    let outputs = outputs.into();
    let Some(wanted) = wanted else {
        return outputs;
    };
    let mut outputs = outputs.into_vec();
    let mut selected = Vec::with_capacity(wanted.len());
    for name in wanted {
        if let Some(index) = outputs.iter().position(|o| &o.name == name) {
            selected.push(outputs.swap_remove(index));
        }
    }
    selected.into()
}

/// Splits a serialized `BYTES` tensor into its elements, or says where the framing breaks.
pub fn split_bytes_elements(data: &[u8]) -> std::result::Result<Vec<&[u8]>, String> {
    let mut elements = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let Some((len_bytes, tail)) = rest.split_first_chunk::<4>() else {
            return Err(format!(
                "element {} has a truncated 4-byte length prefix",
                elements.len()
            ));
        };
        let len = u32::from_le_bytes(*len_bytes) as usize;
        if tail.len() < len {
            return Err(format!(
                "element {} claims {len} bytes but only {} remain",
                elements.len(),
                tail.len()
            ));
        }
        let (element, tail) = tail.split_at(len);
        elements.push(element);
        rest = tail;
    }
    Ok(elements)
}

/// Serializes `BYTES` elements as 4-byte little-endian length + bytes each.
pub fn join_bytes_elements<'a>(elements: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for e in elements {
        out.extend_from_slice(&(e.len() as u32).to_le_bytes());
        out.extend_from_slice(e);
    }
    out
}

/// Number of elements of `shape` (1 for a scalar), or `None` on a negative dimension or overflow.
pub fn element_count(shape: &[i64]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| {
        usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
    })
}

/// A request's inputs at the `TENSORS` level, recorded as `activity` (queued, or handed
/// to the backend).
pub(crate) fn trace_inputs(trace: &RequestTrace, activity: TensorActivity, inputs: &[InputTensor]) {
    if trace.traces_tensors() {
        for input in inputs {
            trace.tensor(
                activity,
                &input.name,
                input.datatype,
                &input.shape,
                &input.data,
            );
        }
    }
}

/// A response's outputs at the `TENSORS` level, as the backend sent them (Triton records
/// them in `InferenceResponse::Send`, for each response).
pub(crate) fn trace_outputs(trace: &RequestTrace, outputs: &[OutputTensor]) {
    if trace.traces_tensors() {
        for output in outputs {
            // Bytes a backend wrote into a CUDA region are copied back only to be traced.
            let data = output.host_data().unwrap_or_default();
            trace.tensor(
                TensorActivity::BackendOutput,
                &output.name,
                output.datatype,
                &output.shape,
                &data,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_elements_round_trip() {
        let joined = join_bytes_elements([b"ab".as_slice(), b"", "é".as_bytes()]);
        let parts = split_bytes_elements(&joined).expect("well-formed");
        assert_eq!(parts, vec![b"ab".as_slice(), b"", "é".as_bytes()]);
    }

    #[test]
    fn bytes_elements_reject_truncation() {
        assert!(split_bytes_elements(&[1, 0, 0]).is_err());
        assert!(split_bytes_elements(&[5, 0, 0, 0, b'a']).is_err());
    }

    fn output(name: &str, byte: u8) -> OutputTensor {
        OutputTensor {
            name: name.into(),
            datatype: DataType::Uint8,
            shape: vec![1],
            data: Bytes::from(vec![byte]),
            device: None,
        }
    }

    #[test]
    fn outputs_are_shared_until_one_holder_writes() {
        let kept: Arc<Vec<OutputTensor>> = Arc::new(vec![output("A", 1), output("B", 2)]);
        let mut answer = Outputs::from(kept.clone());
        assert!(Arc::ptr_eq(&answer.shared(), &kept), "a hit copies nothing");
        answer[0].data = Bytes::from_static(&[9]);
        assert_eq!(answer[0].data[0], 9);
        assert_eq!(
            kept[0].data[0], 1,
            "the kept list never sees a holder's write"
        );
        assert_eq!(Outputs::from(kept.clone()).into_vec(), *kept);
    }

    #[test]
    fn selecting_keeps_the_wanted_order_or_shares_all_and_skips_the_unproduced() {
        let all = Outputs::from(vec![output("A", 1), output("B", 2), output("C", 3)]);
        let kept = all.shared();
        let every = select_outputs(all.clone(), None);
        assert!(
            Arc::ptr_eq(&every.shared(), &kept),
            "all outputs: the same list"
        );
        let wanted = ["C".to_string(), "A".to_string()];
        let some = select_outputs(all, Some(&wanted));
        let names: Vec<&str> = some.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["C", "A"]);
        assert_eq!(
            kept.len(),
            3,
            "selecting from a shared list leaves it whole"
        );
        let wanted = ["D".to_string(), "B".to_string()];
        let produced = select_outputs(kept, Some(&wanted));
        let names: Vec<&str> = produced.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["B"], "an output not produced is left out");
    }

    #[test]
    fn element_count_handles_edge_cases() {
        assert_eq!(element_count(&[]), Some(1));
        assert_eq!(element_count(&[2, 3]), Some(6));
        assert_eq!(element_count(&[2, -1]), None);
        assert_eq!(element_count(&[i64::MAX, i64::MAX]), None);
    }
}
