//! Conversions between the protocol's raw tensor bytes and ORT values, typed through
//! `bytemuck` so unaligned client buffers are handled safely. Aligned number tensors cross
//! in both directions without a copy.

use bytes::Bytes;
use half::{bf16, f16};
use ort::session::SessionInputValue;
use ort::value::{DynValue, PrimitiveTensorElementType, Tensor, TensorElementType, TensorRef};

use nereid_core::request::split_bytes_elements;
use nereid_core::{DataType, Error, Result};

use crate::strings;

/// The ORT element type of a protocol type.
pub fn element_type(t: DataType) -> TensorElementType {
    match t {
        DataType::Bool => TensorElementType::Bool,
        DataType::Uint8 => TensorElementType::Uint8,
        DataType::Uint16 => TensorElementType::Uint16,
        DataType::Uint32 => TensorElementType::Uint32,
        DataType::Uint64 => TensorElementType::Uint64,
        DataType::Int8 => TensorElementType::Int8,
        DataType::Int16 => TensorElementType::Int16,
        DataType::Int32 => TensorElementType::Int32,
        DataType::Int64 => TensorElementType::Int64,
        DataType::Fp16 => TensorElementType::Float16,
        DataType::Fp32 => TensorElementType::Float32,
        DataType::Fp64 => TensorElementType::Float64,
        DataType::Bf16 => TensorElementType::Bfloat16,
        DataType::Bytes => TensorElementType::String,
    }
}

/// The protocol type of an ORT element type, if the protocol has one.
pub fn protocol_type(t: TensorElementType) -> Option<DataType> {
    DataType::ALL.into_iter().find(|d| element_type(*d) == t)
}

/// ONNX's own name of the element type behind protocol type `t` (`FLOAT` for FP32,
/// `STRING` for BYTES), the spelling Triton's ONNX Runtime backend uses when a sequence
/// control's type differs from the graph's.
pub fn onnx_name(t: DataType) -> &'static str {
    match t {
        DataType::Fp16 => "FLOAT16",
        DataType::Fp32 => "FLOAT",
        DataType::Fp64 => "DOUBLE",
        DataType::Bf16 => "BFLOAT16",
        DataType::Bytes => "STRING",
        other => other.as_str(),
    }
}

fn ort_error(e: impl std::fmt::Display) -> Error {
    Error::internal(format!("onnx runtime error: {e}"))
}

fn primitive<T>(shape: &[i64], data: &[u8]) -> Result<DynValue>
where
    T: PrimitiveTensorElementType + bytemuck::Pod + std::fmt::Debug,
{
    let values: Vec<T> = bytemuck::pod_collect_to_vec(data);
    Ok(Tensor::from_array((shape.to_vec(), values))
        .map_err(ort_error)?
        .into_dyn())
}

fn primitive_view<'a, T>(shape: &[i64], data: &'a [u8]) -> Result<Option<SessionInputValue<'a>>>
where
    T: PrimitiveTensorElementType + bytemuck::Pod + std::fmt::Debug,
{
    let Ok(values) = bytemuck::try_cast_slice::<u8, T>(data) else {
        return Ok(None);
    };
    let view = TensorRef::from_array_view((shape.to_vec(), values)).map_err(ort_error)?;
    Ok(Some(view.into()))
}

/// An ORT tensor that borrows validated protocol bytes without copying them, when the
/// type is a plain number type and the bytes are aligned for it (request bodies and
/// shared-memory regions usually are); `None` means "convert with [`to_value`]".
pub fn to_value_view<'a>(
    t: DataType,
    shape: &[i64],
    data: &'a [u8],
) -> Result<Option<SessionInputValue<'a>>> {
    match t {
        DataType::Uint8 => primitive_view::<u8>(shape, data),
        DataType::Uint16 => primitive_view::<u16>(shape, data),
        DataType::Uint32 => primitive_view::<u32>(shape, data),
        DataType::Uint64 => primitive_view::<u64>(shape, data),
        DataType::Int8 => primitive_view::<i8>(shape, data),
        DataType::Int16 => primitive_view::<i16>(shape, data),
        DataType::Int32 => primitive_view::<i32>(shape, data),
        DataType::Int64 => primitive_view::<i64>(shape, data),
        DataType::Fp16 => primitive_view::<f16>(shape, data),
        DataType::Fp32 => primitive_view::<f32>(shape, data),
        DataType::Fp64 => primitive_view::<f64>(shape, data),
        DataType::Bf16 => primitive_view::<bf16>(shape, data),
        // bool needs 0/1 bytes turned into Rust bools; strings need a copy into ORT.
        DataType::Bool | DataType::Bytes => Ok(None),
    }
}

/// Builds an ORT tensor of type `t` and `shape` from validated protocol bytes.
pub fn to_value(t: DataType, shape: &[i64], data: &[u8]) -> Result<DynValue> {
    match t {
        DataType::Bool => {
            let values: Vec<bool> = data.iter().map(|&b| b != 0).collect();
            Ok(Tensor::from_array((shape.to_vec(), values))
                .map_err(ort_error)?
                .into_dyn())
        }
        DataType::Uint8 => primitive::<u8>(shape, data),
        DataType::Uint16 => primitive::<u16>(shape, data),
        DataType::Uint32 => primitive::<u32>(shape, data),
        DataType::Uint64 => primitive::<u64>(shape, data),
        DataType::Int8 => primitive::<i8>(shape, data),
        DataType::Int16 => primitive::<i16>(shape, data),
        DataType::Int32 => primitive::<i32>(shape, data),
        DataType::Int64 => primitive::<i64>(shape, data),
        DataType::Fp16 => primitive::<f16>(shape, data),
        DataType::Fp32 => primitive::<f32>(shape, data),
        DataType::Fp64 => primitive::<f64>(shape, data),
        DataType::Bf16 => primitive::<bf16>(shape, data),
        DataType::Bytes => {
            // Any bytes: ONNX strings are `std::string`s, filled with explicit lengths.
            let elements = split_bytes_elements(data).map_err(Error::invalid_arg)?;
            strings::to_string_tensor(shape, &elements)
        }
    }
}

/// An ORT output tensor handed out as `Bytes` without copying: the value stays alive as
/// long as any slice of it does (responses, scattered batch parts, shared-memory writes).
struct OrtOutput {
    value: DynValue,
    datatype: DataType,
}

impl OrtOutput {
    /// The tensor's shape and bytes; `None` for types that need converting.
    fn extract(&self) -> Option<(&[i64], &[u8])> {
        fn raw<T: PrimitiveTensorElementType + bytemuck::Pod>(
            value: &DynValue,
        ) -> Option<(&[i64], &[u8])> {
            let (shape, data) = value.try_extract_tensor::<T>().ok()?;
            Some((shape, bytemuck::cast_slice(data)))
        }
        match self.datatype {
            DataType::Uint8 => raw::<u8>(&self.value),
            DataType::Uint16 => raw::<u16>(&self.value),
            DataType::Uint32 => raw::<u32>(&self.value),
            DataType::Uint64 => raw::<u64>(&self.value),
            DataType::Int8 => raw::<i8>(&self.value),
            DataType::Int16 => raw::<i16>(&self.value),
            DataType::Int32 => raw::<i32>(&self.value),
            DataType::Int64 => raw::<i64>(&self.value),
            DataType::Fp16 => raw::<f16>(&self.value),
            DataType::Fp32 => raw::<f32>(&self.value),
            DataType::Fp64 => raw::<f64>(&self.value),
            DataType::Bf16 => raw::<bf16>(&self.value),
            DataType::Bool | DataType::Bytes => None,
        }
    }
}

impl AsRef<[u8]> for OrtOutput {
    fn as_ref(&self) -> &[u8] {
        // `from_value` only wraps values whose extraction succeeded, so this is never empty
        // by accident.
        self.extract().map_or(&[], |(_, bytes)| bytes)
    }
}

/// Reads an ORT output tensor of type `t` into protocol bytes and its shape. Number types
/// are not copied: the bytes borrow ORT's buffer.
pub fn from_value(t: DataType, value: DynValue) -> Result<(Vec<i64>, Bytes)> {
    match t {
        DataType::Bool => {
            let (shape, data) = value.try_extract_tensor::<bool>().map_err(ort_error)?;
            let bytes: Vec<u8> = data.iter().map(|&b| u8::from(b)).collect();
            Ok((shape.to_vec(), Bytes::from(bytes)))
        }
        DataType::Bytes => {
            let (shape, joined) = strings::from_string_tensor(&value)?;
            Ok((shape, Bytes::from(joined)))
        }
        _ => {
            let output = OrtOutput { value, datatype: t };
            let shape = output.extract().map(|(shape, _)| shape.to_vec());
            let shape = shape.ok_or_else(|| {
                Error::internal(format!("onnx runtime error: output is not a {t} tensor"))
            })?;
            Ok((shape, Bytes::from_owner(output)))
        }
    }
}
