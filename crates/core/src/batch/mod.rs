//! A batch of requests handed to an instance, with the two operations every backend needs:
//! gather one input across the requests (one copy at most, none for a single request) and
//! scatter batch outputs back to the requests (zero-copy `Bytes` slices). What ragged
//! models add (inputs without padding, `batch_input`, `batch_output`) is in `ragged`.

mod ragged;

use bytes::{Bytes, BytesMut};

use crate::error::{Error, Result};
use crate::model::ModelSpec;
use crate::presence::CallerPresence;
use crate::request::{split_bytes_elements, InferRequest, OutputTensor};
use nereid_proto::DataType;

/// One input gathered over a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct GatheredInput {
    /// Shape with the batch dimension summed over the requests, in the input's `reshape`
    /// layout when it has one.
    pub shape: Vec<i64>,
    /// The concatenated bytes.
    pub data: Bytes,
}

/// The requests an instance executes together.
#[derive(Debug)]
pub struct Batch<'a> {
    spec: &'a ModelSpec,
    requests: Vec<&'a InferRequest>,
    sizes: Vec<usize>,
    /// Per request, its caller's presence where the scheduler watches it.
    callers: Vec<Option<CallerPresence>>,
}

impl<'a> Batch<'a> {
    /// A batch of validated `requests` with their batch sizes.
    pub fn new(spec: &'a ModelSpec, requests: Vec<&'a InferRequest>, sizes: Vec<usize>) -> Self {
        debug_assert_eq!(requests.len(), sizes.len());
        Self {
            spec,
            requests,
            sizes,
            callers: Vec::new(),
        }
    }

    /// The batch with each request's caller presence (in batch order), so a backend can
    /// tell while it runs whether a caller left.
    pub fn with_callers(mut self, callers: Vec<Option<CallerPresence>>) -> Self {
        self.callers = callers;
        self
    }

    /// The presence of request `index`'s caller, where known (cloned: the backend may
    /// keep it past the call, as a hosted backend's request objects outlive `execute`).
    pub fn caller(&self, index: usize) -> Option<CallerPresence> {
        self.callers.get(index).cloned().flatten()
    }

    /// The model being executed.
    pub fn spec(&self) -> &ModelSpec {
        self.spec
    }

    /// The requests, in batch order.
    pub fn requests(&self) -> &[&'a InferRequest] {
        &self.requests
    }

    /// Number of requests.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether the batch has no request.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// Sum of the requests' batch sizes (the batch dimension of gathered inputs).
    pub fn total_batch_size(&self) -> usize {
        self.sizes.iter().sum()
    }

    /// The input `name` of every request, concatenated along the batch dimension, in the
    /// shape the backend sees (its `reshape`, batch dimension kept, when it has one);
    /// `None` when no request has it (an optional input left out). An
    /// `allow_ragged_batch` input is concatenated whatever its shapes, as one
    /// dimension of all the elements: the layout Triton's backends give ragged inputs.
    pub fn gather_input(&self, name: &str) -> Result<Option<GatheredInput>> {
        let mut found = self
            .requests
            .iter()
            .filter_map(|r| r.inputs.iter().find(|i| i.name == name));
        let Some(first) = found.next() else {
            return Ok(None);
        };
        if self.spec.input(name).is_some_and(|t| t.allow_ragged_batch) {
            let parts: Vec<_> = std::iter::once(first).chain(found).collect();
            return self.gather_ragged(name, &parts).map(Some);
        }
        if self.requests.len() == 1 {
            return Ok(Some(GatheredInput {
                shape: self.spec.input_model_shape(name, &first.shape),
                data: first.data.clone(),
            }));
        }
        let parts: Vec<_> = std::iter::once(first).chain(found).collect();
        if parts.len() != self.requests.len() {
            return Err(Error::invalid_arg(format!(
                "optional input '{name}' must be given by every request of a batch or by none"
            )));
        }
        let mut data = BytesMut::with_capacity(parts.iter().map(|p| p.data.len()).sum());
        for p in &parts {
            data.extend_from_slice(&p.data);
        }
        let mut shape = first.shape.clone();
        shape[0] = self.total_batch_size() as i64;
        Ok(Some(GatheredInput {
            shape: self.spec.input_model_shape(name, &shape),
            data: data.freeze(),
        }))
    }

    /// Splits whole-batch outputs into each request's part: along the batch dimension,
    /// or, for a `batch_output`, by the shapes of its source input in the requests.
    pub fn scatter(&self, outputs: Vec<OutputTensor>) -> Vec<Result<Vec<OutputTensor>>> {
        if self.requests.len() == 1 && self.spec.batch_outputs.is_empty() {
            return vec![Ok(outputs)];
        }
        let mut per_request: Vec<Vec<OutputTensor>> = vec![Vec::new(); self.requests.len()];
        for output in outputs {
            let parts = match self.spec.batch_output(&output.name) {
                Some(cut) => self.scatter_with_input_shape(&output, cut),
                None if self.requests.len() == 1 => Ok(vec![output]),
                None => self.split_output(&output),
            };
            match parts {
                Ok(parts) => {
                    for (slot, part) in per_request.iter_mut().zip(parts) {
                        slot.push(part);
                    }
                }
                Err(e) => return self.requests.iter().map(|_| Err(e.clone())).collect(),
            }
        }
        per_request.into_iter().map(Ok).collect()
    }

    fn split_output(&self, output: &OutputTensor) -> Result<Vec<OutputTensor>> {
        let total = self.total_batch_size();
        if output.shape.first().copied() != Some(total as i64) {
            return Err(Error::internal(format!(
                "output '{}' of model '{}' has batch dimension {:?}, expected {total}",
                output.name,
                self.spec.name,
                output.shape.first()
            )));
        }
        let row_offsets = row_byte_offsets(output, total)?;
        let mut parts = Vec::with_capacity(self.sizes.len());
        let mut row = 0;
        for &size in &self.sizes {
            let mut shape = output.shape.clone();
            shape[0] = size as i64;
            parts.push(OutputTensor {
                name: output.name.clone(),
                datatype: output.datatype,
                shape,
                data: output.data.slice(row_offsets[row]..row_offsets[row + size]),
                device: None,
            });
            row += size;
        }
        Ok(parts)
    }
}

/// Byte offset where each of the `rows` batch rows of `output` starts, plus the end.
fn row_byte_offsets(output: &OutputTensor, rows: usize) -> Result<Vec<usize>> {
    if output.datatype.element_size().is_some() {
        let row_bytes = output.data.len() / rows.max(1);
        return Ok((0..=rows).map(|r| r * row_bytes).collect());
    }
    debug_assert_eq!(output.datatype, DataType::Bytes);
    let elements = split_bytes_elements(&output.data).map_err(Error::internal)?;
    let per_row = elements.len() / rows.max(1);
    let mut offsets = Vec::with_capacity(rows + 1);
    let mut offset = 0;
    for (i, e) in elements.iter().enumerate() {
        if i % per_row.max(1) == 0 && offsets.len() < rows {
            offsets.push(offset);
        }
        offset += 4 + e.len();
    }
    while offsets.len() <= rows {
        offsets.push(offset);
    }
    Ok(offsets)
}

#[cfg(test)]
mod tests;
