//! What ragged batching adds to a batch (Triton's `docs/user_guide/ragged_batching.md`,
//! computed as its backends' input collector and output responder do): ragged inputs
//! end to end without padding, the `batch_input` tensors that tell the model where each
//! request's elements are, and `batch_output`s cut back by the requests' input shapes.

use bytes::{BufMut, Bytes, BytesMut};

use super::{Batch, GatheredInput};
use crate::error::{Error, Result};
use crate::model::{BatchInputKind, BatchInputSpec, BatchOutputSpec};
use crate::request::{element_count, InputTensor, OutputTensor};
use nereid_proto::DataType;

impl Batch<'_> {
    /// A ragged input's parts end to end, shaped `[elements]`.
    pub(super) fn gather_ragged(
        &self,
        name: &str,
        parts: &[&InputTensor],
    ) -> Result<GatheredInput> {
        if parts.len() != self.requests.len() {
            return Err(Error::invalid_arg(format!(
                "optional input '{name}' must be given by every request of a batch or by none"
            )));
        }
        let mut elements = 0usize;
        for part in parts {
            elements += element_count(&part.shape).ok_or_else(|| {
                Error::invalid_arg(format!("input '{name}' has an invalid shape"))
            })?;
        }
        let data = if parts.len() == 1 {
            parts[0].data.clone()
        } else {
            let mut data = BytesMut::with_capacity(parts.iter().map(|p| p.data.len()).sum());
            for part in parts {
                data.extend_from_slice(&part.data);
            }
            data.freeze()
        };
        Ok(GatheredInput {
            shape: vec![elements as i64],
            data,
        })
    }

    /// The tensor `batch_input` describes for this batch, fed to each of its targets.
    pub fn batch_input(&self, batch_input: &BatchInputSpec) -> Result<GatheredInput> {
        let shapes = self.source_shapes(&batch_input.source)?;
        let mut counts = Vec::with_capacity(shapes.len());
        for shape in &shapes {
            let count = element_count(shape).ok_or_else(|| {
                Error::invalid_arg(format!(
                    "input '{}' has an invalid shape",
                    batch_input.source
                ))
            })?;
            counts.push(count as i64);
        }
        let running = || {
            counts.iter().scan(0i64, |sum, &c| {
                *sum += c;
                Some(*sum)
            })
        };
        let (shape, values): (Vec<i64>, Vec<i64>) = match batch_input.kind {
            BatchInputKind::ElementCount => (vec![counts.len() as i64], counts.clone()),
            BatchInputKind::AccumulatedElementCount => {
                (vec![counts.len() as i64], running().collect())
            }
            BatchInputKind::AccumulatedElementCountWithZero => (
                vec![counts.len() as i64 + 1],
                std::iter::once(0).chain(running()).collect(),
            ),
            BatchInputKind::MaxElementCountAsShape => {
                let max = counts.iter().copied().max().unwrap_or(0);
                (vec![max], vec![0; max as usize])
            }
            BatchInputKind::ItemShape | BatchInputKind::ItemShapeFlatten => {
                let mut values = Vec::new();
                let mut items = 0i64;
                let mut rank = 0usize;
                for shape in &shapes {
                    let Some((&batch, dims)) = shape.split_first() else {
                        return Err(Error::invalid_arg(format!(
                            "batch input '{}' needs input '{}' to have a batch dimension",
                            batch_input.targets.join(","),
                            batch_input.source
                        )));
                    };
                    for _ in 0..batch {
                        values.extend_from_slice(dims);
                    }
                    items += batch;
                    rank = dims.len();
                }
                let shape = if batch_input.kind == BatchInputKind::ItemShape {
                    vec![items, rank as i64]
                } else {
                    vec![items * rank as i64]
                };
                (shape, values)
            }
        };
        Ok(GatheredInput {
            shape,
            data: encode(batch_input.datatype, &values),
        })
    }

    /// A `batch_output` cut into each request's part, in order: each part is shaped like
    /// the output's configured shape with every -1 taken from the request's source input.
    pub(super) fn scatter_with_input_shape(
        &self,
        output: &OutputTensor,
        cut: &BatchOutputSpec,
    ) -> Result<Vec<OutputTensor>> {
        let element_size = output.datatype.element_size().ok_or_else(|| {
            Error::internal(format!(
                "batch output '{}' of model '{}' must have a fixed-size data type",
                output.name, self.spec.name
            ))
        })?;
        let mut parts = Vec::with_capacity(self.requests.len());
        let mut offset = 0usize;
        for source in self.source_shapes(&cut.source)? {
            let shape = cut
                .shape
                .iter()
                .enumerate()
                .map(|(i, &d)| match d {
                    -1 => source.get(i).copied(),
                    d => Some(d),
                })
                .collect::<Option<Vec<i64>>>()
                .ok_or_else(|| {
                    Error::internal(format!(
                        "batch output '{}' has more dimensions than its source input '{}'",
                        output.name, cut.source
                    ))
                })?;
            let end = element_count(&shape)
                .and_then(|n| n.checked_mul(element_size))
                .and_then(|n| n.checked_add(offset))
                .filter(|&end| end <= output.data.len())
                .ok_or_else(|| {
                    Error::internal(format!(
                        "output '{}' of model '{}' has {} bytes, fewer than its batch_output parts need",
                        output.name,
                        self.spec.name,
                        output.data.len()
                    ))
                })?;
            parts.push(OutputTensor {
                name: output.name.clone(),
                datatype: output.datatype,
                shape,
                data: output.data.slice(offset..end),
                device: None,
            });
            offset = end;
        }
        Ok(parts)
    }

    /// The shape of input `source` in each request, as the backend sees it.
    fn source_shapes(&self, source: &str) -> Result<Vec<Vec<i64>>> {
        self.requests
            .iter()
            .map(|request| {
                let input = request
                    .inputs
                    .iter()
                    .find(|i| i.name == source)
                    .ok_or_else(|| {
                        Error::invalid_arg(format!(
                            "input '{source}' is required: the model's batch_input or batch_output is computed from it"
                        ))
                    })?;
                Ok(self.spec.input_model_shape(source, &input.shape))
            })
            .collect()
    }
}

/// `values` as little-endian `INT32` or `FP32` elements, the two batch input types.
fn encode(datatype: DataType, values: &[i64]) -> Bytes {
    let mut data = BytesMut::with_capacity(values.len() * 4);
    for &v in values {
        if datatype == DataType::Fp32 {
            data.put_f32_le(v as f32);
        } else {
            data.put_i32_le(v as i32);
        }
    }
    data.freeze()
}
