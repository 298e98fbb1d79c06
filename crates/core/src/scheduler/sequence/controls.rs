//! The sequence batcher's control tensors for each request it hands to the model: START,
//! END, READY and CORRID filled from the request's sequence flags, as the model's
//! [`ControlSpec`] asks for them.

use bytes::Bytes;

use crate::model::ControlSpec;
use crate::request::InputTensor;
use crate::sequence_flags::{SequenceFlags, SequenceId};
use nereid_proto::DataType;

/// The control tensors of one model.
#[derive(Debug, Clone)]
pub struct Controls {
    spec: ControlSpec,
    /// Whether requests carry a batch dimension (tensors are `[1, 1]` instead of `[1]`).
    batching: bool,
}

impl Controls {
    /// Controls as `spec` describes them, for a model that batches or not.
    pub fn new(spec: ControlSpec, batching: bool) -> Self {
        Self { spec, batching }
    }

    fn shape(&self) -> Vec<i64> {
        if self.batching {
            vec![1, 1]
        } else {
            vec![1]
        }
    }

    /// The control tensors of one request (`None`: a padding request, READY false and
    /// every other control false or zero).
    pub fn tensors(&self, flags: Option<&SequenceFlags>) -> Vec<InputTensor> {
        let mut tensors = Vec::with_capacity(4);
        let values = [
            (&self.spec.start, flags.is_some_and(|f| f.start)),
            (&self.spec.end, flags.is_some_and(|f| f.end)),
            (&self.spec.ready, flags.is_some()),
        ];
        for (switch, on) in values {
            if let Some(s) = switch {
                tensors.push(InputTensor {
                    name: s.name.clone(),
                    datatype: s.datatype,
                    shape: self.shape(),
                    data: s.values[usize::from(on)].clone(),
                    device: None,
                });
            }
        }
        if let Some(c) = &self.spec.corrid {
            tensors.push(InputTensor {
                name: c.name.clone(),
                datatype: c.datatype,
                shape: self.shape(),
                data: corrid_bytes(c.datatype, flags.map(|f| &f.id)),
                device: None,
            });
        }
        tensors
    }
}

/// The CORRID tensor's bytes: numbers little-endian (32-bit types take the low half),
/// strings as a 4-byte length and the bytes; padding requests get 0 / "".
fn corrid_bytes(datatype: DataType, id: Option<&SequenceId>) -> Bytes {
    let number = |id: Option<&SequenceId>| match id {
        Some(SequenceId::Number(n)) => *n,
        // A string ID for a numeric CORRID: its hash, so distinct strings stay distinct
        // (Triton reinterprets the string's bytes and can overflow its buffer).
        Some(SequenceId::Text(s)) => xxhash_rust::xxh3::xxh3_64(s.as_bytes()),
        None => 0,
    };
    match datatype {
        DataType::Bytes => {
            let text = match id {
                Some(SequenceId::Text(s)) => s.clone(),
                Some(SequenceId::Number(n)) => n.to_string(),
                None => String::new(),
            };
            let mut data = (text.len() as u32).to_le_bytes().to_vec();
            data.extend_from_slice(text.as_bytes());
            Bytes::from(data)
        }
        DataType::Uint32 | DataType::Int32 => {
            Bytes::copy_from_slice(&(number(id) as u32).to_le_bytes())
        }
        _ => Bytes::copy_from_slice(&number(id).to_le_bytes()),
    }
}

#[cfg(test)]
#[path = "controls_tests.rs"]
mod tests;
