//! `TRITONSERVER_Parameter`: a named value (string, integer, boolean, double or bytes)
//! passed to model loads, repository registration and metrics, and listed on responses.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CString};

use nereid_core::request::ParamValue;

use crate::ffi;

/// `TRITONSERVER_ParameterType` values.
pub mod kind {
    /// `TRITONSERVER_PARAMETER_STRING`
    pub const STRING: u32 = 0;
    /// `TRITONSERVER_PARAMETER_INT`
    pub const INT: u32 = 1;
    /// `TRITONSERVER_PARAMETER_BOOL`
    pub const BOOL: u32 = 2;
    /// `TRITONSERVER_PARAMETER_DOUBLE`
    pub const DOUBLE: u32 = 3;
    /// `TRITONSERVER_PARAMETER_BYTES`
    pub const BYTES: u32 = 4;
}

/// A parameter's value, stored so that the pointer C reads (`ValuePointer` in Triton: the
/// string itself for STRING, else the address of the value) stays valid while it lives.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// STRING, NUL-terminated for C.
    String(CString),
    /// INT.
    Int(i64),
    /// BOOL.
    Bool(bool),
    /// DOUBLE.
    Double(f64),
    /// BYTES (the caller's bytes, copied).
    Bytes(Vec<u8>),
}

impl Value {
    /// The `TRITONSERVER_ParameterType` of the value.
    pub fn kind(&self) -> u32 {
        match self {
            Value::String(_) => kind::STRING,
            Value::Int(_) => kind::INT,
            Value::Bool(_) => kind::BOOL,
            Value::Double(_) => kind::DOUBLE,
            Value::Bytes(_) => kind::BYTES,
        }
    }

    /// What C reads for the value.
    pub fn pointer(&self) -> *const c_void {
        match self {
            Value::String(s) => s.as_ptr().cast(),
            Value::Int(i) => (i as *const i64).cast(),
            Value::Bool(b) => (b as *const bool).cast(),
            Value::Double(d) => (d as *const f64).cast(),
            Value::Bytes(b) => b.as_ptr().cast(),
        }
    }

    /// The value of a core request or response parameter (an unsigned integer too large
    /// for INT keeps its bits, as Triton's uint64 parameters do).
    pub fn from_core(value: &ParamValue) -> Self {
        match value {
            ParamValue::Bool(b) => Value::Bool(*b),
            ParamValue::Int(i) => Value::Int(*i),
            ParamValue::Uint(u) => Value::Int(*u as i64),
            ParamValue::Double(d) => Value::Double(*d),
            ParamValue::String(s) => Value::String(c_string(s)),
        }
    }
}

/// `text` as a C string; an interior NUL ends it there, as C would read it anyway.
pub fn c_string(text: &str) -> CString {
    let end = text.find('\0').unwrap_or(text.len());
    CString::new(&text[..end]).expect("the text was cut before its first NUL")
}

/// The object behind `TRITONSERVER_Parameter*`.
#[derive(Debug, Clone, PartialEq)]
pub struct TRITONSERVER_Parameter {
    /// Name.
    pub name: CString,
    /// Value.
    pub value: Value,
}

impl TRITONSERVER_Parameter {
    /// The name as text.
    pub fn name(&self) -> String {
        self.name.to_string_lossy().into_owned()
    }
}

/// `TRITONSERVER_ParameterTypeString`: "STRING", "INT", "BOOL", "DOUBLE", "BYTES" or
/// "<invalid>".
#[no_mangle]
pub extern "C" fn TRITONSERVER_ParameterTypeString(paramtype: u32) -> *const c_char {
    match paramtype {
        kind::STRING => c"STRING".as_ptr(),
        kind::INT => c"INT".as_ptr(),
        kind::BOOL => c"BOOL".as_ptr(),
        kind::DOUBLE => c"DOUBLE".as_ptr(),
        kind::BYTES => c"BYTES".as_ptr(),
        _ => c"<invalid>".as_ptr(),
    }
}

/// `TRITONSERVER_ParameterNew`: a STRING, INT, BOOL or DOUBLE parameter read from `value`;
/// null for another type (BYTES has its own constructor) or a null argument.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ParameterNew(
    name: *const c_char,
    type_: u32,
    value: *const c_void,
) -> *mut TRITONSERVER_Parameter {
    // SAFETY: the caller passes a NUL-terminated name or null (checked).
    let Ok(name) = (unsafe { ffi::text(name, "name") }) else {
        return std::ptr::null_mut();
    };
    if value.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: `value` (non-null) points to a value of the declared type, as the header
    // requires: a C string for STRING, an int64_t, bool or double otherwise.
    let value = unsafe {
        match type_ {
            kind::STRING => match ffi::text(value.cast(), "value") {
                Ok(text) => Value::String(c_string(text)),
                Err(e) => {
                    crate::error::TRITONSERVER_ErrorDelete(e);
                    return std::ptr::null_mut();
                }
            },
            kind::INT => Value::Int(value.cast::<i64>().read_unaligned()),
            kind::BOOL => Value::Bool(value.cast::<u8>().read() != 0),
            kind::DOUBLE => Value::Double(value.cast::<f64>().read_unaligned()),
            _ => return std::ptr::null_mut(),
        }
    };
    Box::into_raw(Box::new(TRITONSERVER_Parameter {
        name: c_string(name),
        value,
    }))
}

/// `TRITONSERVER_ParameterBytesNew`: a BYTES parameter holding a copy of `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ParameterBytesNew(
    name: *const c_char,
    byte_ptr: *const c_void,
    size: u64,
) -> *mut TRITONSERVER_Parameter {
    // SAFETY: the caller passes a NUL-terminated name or null (checked).
    let Ok(name) = (unsafe { ffi::text(name, "name") }) else {
        return std::ptr::null_mut();
    };
    let bytes = if size == 0 {
        Vec::new()
    } else if byte_ptr.is_null() {
        return std::ptr::null_mut();
    } else {
        // SAFETY: the caller passes `size` readable bytes at `byte_ptr` (non-null).
        unsafe { std::slice::from_raw_parts(byte_ptr.cast::<u8>(), size as usize) }.to_vec()
    };
    Box::into_raw(Box::new(TRITONSERVER_Parameter {
        name: c_string(name),
        value: Value::Bytes(bytes),
    }))
}

/// `TRITONSERVER_ParameterDelete`: frees a parameter (null is ignored).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ParameterDelete(parameter: *mut TRITONSERVER_Parameter) {
    if !parameter.is_null() {
        // SAFETY: created by this module and owned by the caller.
        drop(unsafe { Box::from_raw(parameter) });
    }
}

/// The parameters of a C array of `count` parameter pointers, or an error naming `what`
/// when the array is null with a non-zero count or holds a null entry.
///
/// # Safety
/// A non-null `list` must hold `count` pointers to live parameters.
pub unsafe fn list<'a>(
    list: *const *const TRITONSERVER_Parameter,
    count: usize,
    null_message: &str,
) -> Result<Vec<&'a TRITONSERVER_Parameter>, crate::error::ErrorPtr> {
    if count == 0 {
        return Ok(Vec::new());
    }
    if list.is_null() {
        return Err(crate::error::invalid_arg(null_message));
    }
    // SAFETY: `count` pointers at `list` (non-null) by the caller's contract.
    let pointers = unsafe { std::slice::from_raw_parts(list, count) };
    pointers
        .iter()
        // SAFETY: each entry is a live parameter or null (checked).
        .map(|p| unsafe { ffi::reference(*p, "parameter") })
        .collect()
}
