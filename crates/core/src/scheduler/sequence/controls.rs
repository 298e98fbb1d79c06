//! The sequence batcher's control inputs (`control_input`): START, END, READY and CORRID
//! tensors the server fills for every request it hands to the model, validated with
//! Triton's load-time messages.

use bytes::Bytes;
use nereid_proto::inference::model_sequence_batching::control::Kind;
use nereid_proto::inference::{DataType as ConfigType, ModelSequenceBatching};

use super::flags::{SequenceFlags, SequenceId};
use crate::error::{Error, Result};
use crate::model::TensorSpec;
use crate::request::InputTensor;
use crate::DataType;

/// A boolean control (START, END, READY): its tensor and the bytes of false and true.
#[derive(Debug, Clone)]
struct Switch {
    name: String,
    datatype: DataType,
    values: [Bytes; 2],
}

/// How the model wants its control tensors.
#[derive(Debug, Clone, Default)]
pub struct Controls {
    start: Option<Switch>,
    end: Option<Switch>,
    ready: Option<Switch>,
    corrid: Option<(String, DataType)>,
    /// Whether requests carry a batch dimension (tensors are `[1, 1]` instead of `[1]`).
    batching: bool,
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::ControlSequenceStart => "CONTROL_SEQUENCE_START",
        Kind::ControlSequenceReady => "CONTROL_SEQUENCE_READY",
        Kind::ControlSequenceEnd => "CONTROL_SEQUENCE_END",
        Kind::ControlSequenceCorrid => "CONTROL_SEQUENCE_CORRID",
    }
}

impl Controls {
    /// Reads and validates `config`'s control inputs for model `model`.
    pub fn new(config: &ModelSequenceBatching, model: &str, batching: bool) -> Result<Self> {
        let mut controls = Controls {
            batching,
            ..Default::default()
        };
        let mut seen = std::collections::HashSet::new();
        for input in &config.control_input {
            if input.name.is_empty() {
                return Err(Error::invalid_arg(format!(
                    "sequence batching control tensor must have a name for {model}"
                )));
            }
            if input.control.len() > 1 || !seen.insert(input.name.clone()) {
                return Err(Error::invalid_arg(format!(
                    "sequence batching control tensor '{}' is specified for multiple control kinds for {model}",
                    input.name
                )));
            }
            for control in &input.control {
                let kind = Kind::try_from(control.kind).unwrap_or(Kind::ControlSequenceStart);
                let label = kind_name(kind);
                let duplicate = || {
                    Error::invalid_arg(format!(
                        "sequence batching specifies multiple {label} tensors for {model}"
                    ))
                };
                if kind == Kind::ControlSequenceCorrid {
                    let datatype = corrid_type(control.data_type, model)?;
                    if controls.corrid.is_some() {
                        return Err(duplicate());
                    }
                    controls.corrid = Some((input.name.clone(), datatype));
                    continue;
                }
                let switch = switch(&input.name, control, label, model)?;
                let place = match kind {
                    Kind::ControlSequenceStart => &mut controls.start,
                    Kind::ControlSequenceEnd => &mut controls.end,
                    _ => &mut controls.ready,
                };
                if place.is_some() {
                    return Err(duplicate());
                }
                *place = Some(switch);
            }
        }
        Ok(controls)
    }

    /// The control tensors as model inputs (for the backend; clients never send them).
    pub fn tensor_specs(&self) -> Vec<TensorSpec> {
        let switches = [&self.start, &self.end, &self.ready];
        let mut specs: Vec<TensorSpec> = switches
            .into_iter()
            .flatten()
            .map(|s| TensorSpec::internal(&s.name, s.datatype, vec![1]))
            .collect();
        if let Some((name, datatype)) = &self.corrid {
            specs.push(TensorSpec::internal(name, *datatype, vec![1]));
        }
        specs
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
            (&self.start, flags.is_some_and(|f| f.start)),
            (&self.end, flags.is_some_and(|f| f.end)),
            (&self.ready, flags.is_some()),
        ];
        for (switch, on) in values {
            if let Some(s) = switch {
                tensors.push(InputTensor {
                    name: s.name.clone(),
                    datatype: s.datatype,
                    shape: self.shape(),
                    data: s.values[usize::from(on)].clone(),
                });
            }
        }
        if let Some((name, datatype)) = &self.corrid {
            tensors.push(InputTensor {
                name: name.clone(),
                datatype: *datatype,
                shape: self.shape(),
                data: corrid_bytes(*datatype, flags.map(|f| &f.id)),
            });
        }
        tensors
    }
}

fn corrid_type(t: i32, model: &str) -> Result<DataType> {
    let label = "CONTROL_SEQUENCE_CORRID";
    match ConfigType::try_from(t).unwrap_or(ConfigType::TypeInvalid) {
        ConfigType::TypeInvalid => Err(Error::invalid_arg(format!(
            "sequence batching must specify a data_type value for {label} for {model}"
        ))),
        ConfigType::TypeUint64 => Ok(DataType::Uint64),
        ConfigType::TypeInt64 => Ok(DataType::Int64),
        ConfigType::TypeUint32 => Ok(DataType::Uint32),
        ConfigType::TypeInt32 => Ok(DataType::Int32),
        ConfigType::TypeString => Ok(DataType::Bytes),
        _ => Err(Error::invalid_arg(format!(
            "unexpected data type for control {label} for {model}. Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
        ))),
    }
}

fn switch(
    name: &str,
    control: &nereid_proto::inference::model_sequence_batching::Control,
    label: &str,
    model: &str,
) -> Result<Switch> {
    let given = [
        !control.int32_false_true.is_empty(),
        !control.fp32_false_true.is_empty(),
        !control.bool_false_true.is_empty(),
    ];
    let count = given.iter().filter(|g| **g).count();
    if count == 0 {
        return Err(Error::invalid_arg(format!(
            "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for {label} for {model}"
        )));
    }
    if count > 1 {
        return Err(Error::invalid_arg(format!(
            "sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and 'bool_false_true' for {label} for {model}"
        )));
    }
    let exactly_two = |field: &str, len: usize| {
        if len == 2 {
            Ok(())
        } else {
            Err(Error::invalid_arg(format!(
                "sequence batching control '{field}' must have exactly 2 entries for {label} for {model}"
            )))
        }
    };
    let (datatype, values) = if given[0] {
        exactly_two("int32_false_true", control.int32_false_true.len())?;
        let v = &control.int32_false_true;
        (
            DataType::Int32,
            [v[0].to_le_bytes().to_vec(), v[1].to_le_bytes().to_vec()],
        )
    } else if given[1] {
        exactly_two("fp32_false_true", control.fp32_false_true.len())?;
        let v = &control.fp32_false_true;
        (
            DataType::Fp32,
            [v[0].to_le_bytes().to_vec(), v[1].to_le_bytes().to_vec()],
        )
    } else {
        exactly_two("bool_false_true", control.bool_false_true.len())?;
        let v = &control.bool_false_true;
        (DataType::Bool, [vec![u8::from(v[0])], vec![u8::from(v[1])]])
    };
    let [off, on] = values;
    Ok(Switch {
        name: name.to_string(),
        datatype,
        values: [Bytes::from(off), Bytes::from(on)],
    })
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
