//! The requests of a model's `model_warmup` samples, built as Triton's
//! `TritonModelInstance::GenerateWarmupData` builds them: `batch_size` single-row requests
//! per sample (a sample of batch size 0 is skipped), each input filled with zeros, random
//! bytes, or the bytes of a file in the model's `warmup` folder. Every input must have
//! fixed dimensions; a file must hold at least the tensor's bytes (a `BYTES` input takes
//! the whole file, already in Triton's length-prefixed layout). The requests are then
//! checked as a client's would be, so a sample that does not fit the model fails its
//! load before any instance runs it.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use nereid_proto::inference::model_warmup::input::InputDataType;
use nereid_proto::inference::model_warmup::Input;
use nereid_proto::inference::{ModelConfig, ModelWarmup};

use crate::error::{Error, Result};
use crate::model::ModelSpec;
use crate::request::{InferRequest, InputTensor};
use crate::scheduler::WarmupSample;
use crate::validate::{request_prefix, validate_request};
use nereid_proto::DataType;

/// Triton's folder for warmup data files, inside the model's directory.
const WARMUP_FOLDER: &str = "warmup";

/// The samples of `config` for `spec`, reading data files from `model_dir/warmup`.
pub(super) fn warmup_samples(
    spec: &ModelSpec,
    config: &ModelConfig,
    model_dir: &Path,
) -> Result<Vec<WarmupSample>> {
    let mut samples = Vec::new();
    let mut random = Random::seeded();
    for setting in &config.model_warmup {
        if setting.batch_size == 0 {
            tracing::debug!(model = %spec.name, sample = %setting.name, "skipping batch 0 warmup sample");
            continue;
        }
        samples.push(sample(spec, setting, model_dir, &mut random)?);
    }
    Ok(samples)
}

/// One sample's requests: the same inputs `batch_size` times.
fn sample(
    spec: &ModelSpec,
    setting: &ModelWarmup,
    model_dir: &Path,
    random: &mut Random,
) -> Result<WarmupSample> {
    // Sorted, so that errors and data do not depend on the map's order.
    let mut names: Vec<&String> = setting.inputs.keys().collect();
    names.sort();
    let mut inputs = Vec::with_capacity(names.len());
    for name in names {
        let input = &setting.inputs[name];
        inputs.push(tensor(spec, name, input, model_dir, random)?);
    }
    let request = InferRequest {
        model_name: spec.name.clone(),
        model_version: Some(spec.version),
        inputs,
        ..InferRequest::default()
    };
    // Inputs the model does not declare (sequence controls a sample sets, as Triton's
    // override inputs) go to the backend unchecked; the model's own are checked.
    let declared = InferRequest {
        inputs: request
            .inputs
            .iter()
            .filter(|i| spec.input(&i.name).is_some())
            .cloned()
            .collect(),
        ..request.clone()
    };
    let batch_size = validate_request(spec, &declared)?;
    Ok(WarmupSample {
        name: setting.name.clone(),
        count: setting.count,
        requests: vec![request; setting.batch_size as usize],
        batch_size,
    })
}

/// One input of a sample, one row of it for a batching model.
fn tensor(
    spec: &ModelSpec,
    name: &str,
    input: &Input,
    model_dir: &Path,
    random: &mut Random,
) -> Result<InputTensor> {
    if input.dims.iter().any(|&d| d < 0) {
        return Err(Error::invalid_arg(format!(
            "warmup setting expects all variable-size dimensions are specified for input '{name}'"
        )));
    }
    let datatype = nereid_proto::inference::DataType::try_from(input.data_type)
        .ok()
        .and_then(DataType::from_config)
        .ok_or_else(|| {
            Error::invalid_arg(format!(
                "warmup setting has an unsupported data type for input '{name}'"
            ))
        })?;
    let elements: usize = input.dims.iter().map(|&d| d as usize).product();
    // A BYTES element of zeros is an empty string (its 4-byte length).
    let byte_size = elements * datatype.element_size().unwrap_or(4);
    let data = match &input.input_data_type {
        Some(InputDataType::ZeroData(_)) => Bytes::from(vec![0; byte_size]),
        // Random bytes would not be length-prefixed strings: zeros, as in Triton.
        Some(InputDataType::RandomData(_)) if datatype == DataType::Bytes => {
            Bytes::from(vec![0; byte_size])
        }
        Some(InputDataType::RandomData(_)) => random.bytes(byte_size),
        Some(InputDataType::InputDataFile(file)) => {
            let path = model_dir.join(WARMUP_FOLDER).join(file);
            // A fixed-size input needs its first `byte_size` bytes (Triton reads the whole
            // file and takes those); strings take the whole file.
            let wanted = (datatype != DataType::Bytes).then_some(byte_size);
            let data = read_data_file(&path, wanted)?;
            if datatype == DataType::Bytes {
                Bytes::from(data)
            } else if data.len() < byte_size {
                return Err(Error::invalid_arg(format!(
                    "{}warmup setting expects {byte_size} bytes, but the data provided from {file} only has {} bytes",
                    request_prefix(""),
                    data.len()
                )));
            } else {
                Bytes::from(data).slice(..byte_size)
            }
        }
        None => {
            return Err(Error::invalid_arg(format!(
                "{}warmup setting expects input '{name}' to have input_data_type set",
                request_prefix("")
            )))
        }
    };
    let mut shape = Vec::with_capacity(input.dims.len() + 1);
    if spec.max_batch_size > 0 {
        shape.push(1);
    }
    shape.extend_from_slice(&input.dims);
    Ok(InputTensor {
        name: name.to_string(),
        datatype,
        shape,
        data,
        device: None,
    })
}

/// Random bytes for `random_data` (xorshift: warmup needs arbitrary values, not
/// unpredictable ones).
struct Random(u64);

impl Random {
    fn seeded() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        Self(u64::from(nanos) | 1)
    }

    fn bytes(&mut self, count: usize) -> Bytes {
        let mut out = Vec::with_capacity(count + 8);
        while out.len() < count {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            out.extend_from_slice(&self.0.to_le_bytes());
        }
        out.truncate(count);
        Bytes::from(out)
    }
}

/// The most a warm-up data file of strings may hold: warm-up requests are small, and the
/// whole file becomes one request.
pub const MAX_STRING_DATA_FILE: u64 = 64 << 20;

/// Reads a warm-up data file: its first `wanted` bytes (fewer where the file is shorter),
/// or all of it, at most [`MAX_STRING_DATA_FILE`] bytes. Only a regular file is read: a
/// link to `/dev/zero` or a FIFO would never end or never start.
fn read_data_file(path: &Path, wanted: Option<usize>) -> Result<Vec<u8>> {
    use std::io::Read;
    let failed = |why: &dyn std::fmt::Display| {
        Error::invalid_arg(format!(
            "failed to read warmup data file {}: {why}",
            path.display()
        ))
    };
    let meta = std::fs::metadata(path).map_err(|e| failed(&e))?;
    if !meta.is_file() {
        return Err(failed(&"not a regular file"));
    }
    let limit = match wanted {
        Some(wanted) => wanted as u64,
        None if meta.len() > MAX_STRING_DATA_FILE => {
            return Err(failed(&format_args!(
                "{} bytes, more than the {MAX_STRING_DATA_FILE} bytes a warmup data file of strings may have",
                meta.len()
            )))
        }
        None => MAX_STRING_DATA_FILE,
    };
    let mut data = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(limit).read_to_end(&mut data))
        .map_err(|e| failed(&e))?;
    Ok(data)
}

#[cfg(test)]
#[path = "warmup_tests.rs"]
mod tests;
