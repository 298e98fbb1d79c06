//! The sequence batcher's control inputs (`control_input`) as the model wants them:
//! START, END and READY switches with the bytes of false and true, and the CORRID
//! tensor's type, checked with Triton's load-time messages.

use bytes::Bytes;
use nereid_proto::inference::model_sequence_batching::control::Kind;
use nereid_proto::inference::{DataType as ConfigType, ModelSequenceBatching};

use super::TensorSpec;
use crate::error::{Error, Result};
use nereid_proto::DataType;

/// A boolean control (START, END, READY): its tensor and the bytes of false and true.
#[derive(Debug, Clone, PartialEq)]
pub struct SwitchSpec {
    /// Tensor name.
    pub name: String,
    /// `int32_false_true` → INT32, `fp32_false_true` → FP32, `bool_false_true` → BOOL.
    pub datatype: DataType,
    /// The element bytes of false (index 0) and true (index 1).
    pub values: [Bytes; 2],
}

/// The CORRID control: the tensor that carries the correlation ID.
#[derive(Debug, Clone, PartialEq)]
pub struct CorridSpec {
    /// Tensor name.
    pub name: String,
    /// UINT64, INT64, UINT32, INT32 or BYTES (`TYPE_STRING`).
    pub datatype: DataType,
}

/// Which control tensors the model wants, and how.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ControlSpec {
    /// CONTROL_SEQUENCE_START.
    pub start: Option<SwitchSpec>,
    /// CONTROL_SEQUENCE_END.
    pub end: Option<SwitchSpec>,
    /// CONTROL_SEQUENCE_READY.
    pub ready: Option<SwitchSpec>,
    /// CONTROL_SEQUENCE_CORRID.
    pub corrid: Option<CorridSpec>,
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::ControlSequenceStart => "CONTROL_SEQUENCE_START",
        Kind::ControlSequenceReady => "CONTROL_SEQUENCE_READY",
        Kind::ControlSequenceEnd => "CONTROL_SEQUENCE_END",
        Kind::ControlSequenceCorrid => "CONTROL_SEQUENCE_CORRID",
    }
}

impl ControlSpec {
    /// Reads and validates `config`'s control inputs for model `model`.
    pub(super) fn from_config(config: &ModelSequenceBatching, model: &str) -> Result<Self> {
        let mut controls = ControlSpec::default();
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
                    controls.corrid = Some(CorridSpec {
                        name: input.name.clone(),
                        datatype,
                    });
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
        if let Some(c) = &self.corrid {
            specs.push(TensorSpec::internal(&c.name, c.datatype, vec![1]));
        }
        specs
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
) -> Result<SwitchSpec> {
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
    Ok(SwitchSpec {
        name: name.to_string(),
        datatype,
        values: [Bytes::from(off), Bytes::from(on)],
    })
}
