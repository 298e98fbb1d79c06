//! The ABI's enums and the functions that name them: API version, data types and memory
//! types, with Triton's numbering.
#![allow(unsafe_code)]

use nereid_core::output_query::MemoryKind;
use std::ffi::{c_char, CStr};

use nereid_core::DataType;

use crate::error::ErrorPtr;
use crate::ffi;

/// `TRITONSERVER_API_VERSION_MAJOR` of the header this library implements.
pub const API_VERSION_MAJOR: u32 = 1;
/// `TRITONSERVER_API_VERSION_MINOR` of the header this library implements.
pub const API_VERSION_MINOR: u32 = 34;

/// `TRITONSERVER_DataType` values, in the header's order.
const DATATYPES: [Option<DataType>; 15] = [
    None, // TRITONSERVER_TYPE_INVALID
    Some(DataType::Bool),
    Some(DataType::Uint8),
    Some(DataType::Uint16),
    Some(DataType::Uint32),
    Some(DataType::Uint64),
    Some(DataType::Int8),
    Some(DataType::Int16),
    Some(DataType::Int32),
    Some(DataType::Int64),
    Some(DataType::Fp16),
    Some(DataType::Fp32),
    Some(DataType::Fp64),
    Some(DataType::Bytes),
    Some(DataType::Bf16),
];

/// The core data type of a raw `TRITONSERVER_DataType` (`None` for INVALID or out of range).
pub fn datatype_from_raw(raw: u32) -> Option<DataType> {
    DATATYPES.get(raw as usize).copied().flatten()
}

/// The raw `TRITONSERVER_DataType` of a core data type.
pub fn datatype_to_raw(datatype: DataType) -> u32 {
    DATATYPES
        .iter()
        .position(|d| *d == Some(datatype))
        .expect("every core data type is in the table") as u32
}

/// `TRITONSERVER_MemoryType` values.
pub mod memory_type {
    /// `TRITONSERVER_MEMORY_CPU`
    pub const CPU: u32 = 0;
    /// `TRITONSERVER_MEMORY_CPU_PINNED`
    pub const CPU_PINNED: u32 = 1;
    /// `TRITONSERVER_MEMORY_GPU`
    pub const GPU: u32 = 2;
}

/// `kind` as `TRITONSERVER_MemoryType` numbers it.
pub(crate) fn memory_type_of(kind: MemoryKind) -> u32 {
    match kind {
        MemoryKind::Cpu => memory_type::CPU,
        MemoryKind::CpuPinned => memory_type::CPU_PINNED,
        MemoryKind::Gpu => memory_type::GPU,
    }
}

/// The memory kind a `TRITONSERVER_MemoryType` number names, if it names one.
pub(crate) fn memory_kind_of(raw: u32) -> Option<MemoryKind> {
    match raw {
        memory_type::CPU => Some(MemoryKind::Cpu),
        memory_type::CPU_PINNED => Some(MemoryKind::CpuPinned),
        memory_type::GPU => Some(MemoryKind::Gpu),
        _ => None,
    }
}

/// `TRITONSERVER_ApiVersion`: the API version this library implements.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ApiVersion(major: *mut u32, minor: *mut u32) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: out-parameters from the caller, checked for null by `write`.
        unsafe {
            ffi::write(major, API_VERSION_MAJOR, "major")?;
            ffi::write(minor, API_VERSION_MINOR, "minor")
        }
    })
}

/// Static NUL-terminated names of the data types, in the header's order.
const DATATYPE_NAMES: [&CStr; 15] = [
    c"<invalid>",
    c"BOOL",
    c"UINT8",
    c"UINT16",
    c"UINT32",
    c"UINT64",
    c"INT8",
    c"INT16",
    c"INT32",
    c"INT64",
    c"FP16",
    c"FP32",
    c"FP64",
    c"BYTES",
    c"BF16",
];

/// `TRITONSERVER_DataTypeString`: the type's protocol name ("<invalid>" for an unknown value).
#[no_mangle]
pub extern "C" fn TRITONSERVER_DataTypeString(datatype: u32) -> *const c_char {
    DATATYPE_NAMES
        .get(datatype as usize)
        .unwrap_or(&DATATYPE_NAMES[0])
        .as_ptr()
}

/// `TRITONSERVER_StringToDataType`: the type named `dtype`, INVALID when unknown or null.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_StringToDataType(dtype: *const c_char) -> u32 {
    // SAFETY: the caller passes a NUL-terminated string or null (checked).
    let Ok(name) = (unsafe { ffi::text(dtype, "dtype") }) else {
        return 0;
    };
    DataType::parse(name).map_or(0, datatype_to_raw)
}

/// `TRITONSERVER_DataTypeByteSize`: bytes per element, 0 for BYTES and INVALID.
#[no_mangle]
pub extern "C" fn TRITONSERVER_DataTypeByteSize(datatype: u32) -> u32 {
    datatype_from_raw(datatype)
        .and_then(DataType::element_size)
        .map_or(0, |size| size as u32)
}

/// `TRITONSERVER_MemoryTypeString`: "CPU", "CPU_PINNED", "GPU" or "<invalid>".
#[no_mangle]
pub extern "C" fn TRITONSERVER_MemoryTypeString(memtype: u32) -> *const c_char {
    match memtype {
        memory_type::CPU => c"CPU".as_ptr(),
        memory_type::CPU_PINNED => c"CPU_PINNED".as_ptr(),
        memory_type::GPU => c"GPU".as_ptr(),
        _ => c"<invalid>".as_ptr(),
    }
}

/// Static name of a `TRITONSERVER_InstanceGroupKind` (AUTO=0, CPU=1, GPU=2, MODEL=3).
pub fn instance_group_kind_name(kind: u32) -> *const c_char {
    match kind {
        0 => c"AUTO".as_ptr(),
        1 => c"CPU".as_ptr(),
        2 => c"GPU".as_ptr(),
        3 => c"MODEL".as_ptr(),
        _ => c"<invalid>".as_ptr(),
    }
}

/// The model configuration's kind for a `TRITONSERVER_InstanceGroupKind` (whose numbers
/// differ from the configuration's), `None` for an unknown one.
pub fn instance_group_kind_of(
    kind: u32,
) -> Option<nereid_proto::inference::model_instance_group::Kind> {
    use nereid_proto::inference::model_instance_group::Kind;
    match kind {
        0 => Some(Kind::Auto),
        1 => Some(Kind::Cpu),
        2 => Some(Kind::Gpu),
        3 => Some(Kind::Model),
        _ => None,
    }
}

/// `TRITONSERVER_InstanceGroupKindString`: "AUTO", "CPU", "GPU", "MODEL" or "<invalid>".
#[no_mangle]
pub extern "C" fn TRITONSERVER_InstanceGroupKindString(kind: u32) -> *const c_char {
    instance_group_kind_name(kind)
}
