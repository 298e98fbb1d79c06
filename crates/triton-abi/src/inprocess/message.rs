//! `TRITONSERVER_Message`: a JSON document handed to C as serialized text (server and
//! model metadata, configuration, statistics, repository index).
#![allow(unsafe_code)]

use std::ffi::c_char;

use crate::error::{invalid_arg, ErrorPtr};
use crate::ffi;

/// The object behind `TRITONSERVER_Message*`: the serialized JSON, whose bytes stay put
/// until the message is deleted (`MessageSerializeToJson` hands out a pointer into it).
pub struct TRITONSERVER_Message {
    json: Vec<u8>,
}

impl TRITONSERVER_Message {
    /// A message holding `value` serialized, as Triton's compact JSON writer does (a
    /// struct's fields in their declared order).
    pub fn from_value<T: serde::Serialize + ?Sized>(value: &T) -> Self {
        Self {
            // Only JSON documents and structs with string keys come here, which always
            // serialize.
            json: serde_json::to_vec(value).unwrap_or_default(),
        }
    }

    /// The serialized JSON, as the caller gave it or as it was built.
    pub fn json(&self) -> &[u8] {
        &self.json
    }

    /// Hands a new message to C through `out`.
    ///
    /// # Safety
    /// A non-null `out` must be valid for a write.
    pub unsafe fn give<T: serde::Serialize + ?Sized>(
        out: *mut *mut Self,
        value: &T,
    ) -> Result<(), ErrorPtr> {
        if out.is_null() {
            return Err(invalid_arg("message must not be null"));
        }
        let message = Box::into_raw(Box::new(Self::from_value(value)));
        // SAFETY: checked for null above; the caller owns the new message.
        unsafe { out.write(message) };
        Ok(())
    }
}

/// `TRITONSERVER_MessageNewFromSerializedJson`: a message holding a copy of `byte_size`
/// bytes at `base` (not parsed, as in Triton).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_MessageNewFromSerializedJson(
    message: *mut *mut TRITONSERVER_Message,
    base: *const c_char,
    byte_size: usize,
) -> ErrorPtr {
    ffi::status(|| {
        if message.is_null() {
            return Err(invalid_arg("message must not be null"));
        }
        let json = if byte_size == 0 {
            Vec::new()
        } else if base.is_null() {
            return Err(invalid_arg("base must not be null"));
        } else {
            // SAFETY: the caller passes `byte_size` readable bytes at `base` (non-null).
            unsafe { std::slice::from_raw_parts(base.cast::<u8>(), byte_size) }.to_vec()
        };
        let created = Box::into_raw(Box::new(TRITONSERVER_Message { json }));
        // SAFETY: checked for null above.
        unsafe { message.write(created) };
        Ok(())
    })
}

/// `TRITONSERVER_MessageDelete`: frees a message (null is ignored).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_MessageDelete(
    message: *mut TRITONSERVER_Message,
) -> ErrorPtr {
    if !message.is_null() {
        // SAFETY: created by this module and owned by the caller.
        drop(unsafe { Box::from_raw(message) });
    }
    std::ptr::null_mut()
}

/// `TRITONSERVER_MessageSerializeToJson`: the JSON text and its length, valid until the
/// message is deleted (not NUL-terminated, as in Triton).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_MessageSerializeToJson(
    message: *mut TRITONSERVER_Message,
    base: *mut *const c_char,
    byte_size: *mut usize,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a live message from this module, or null (checked).
        let message = unsafe { ffi::reference(message, "message") }?;
        // SAFETY: out-parameters from the caller, checked for null by `write`.
        unsafe {
            ffi::write(base, message.json.as_ptr().cast(), "base")?;
            ffi::write(byte_size, message.json.len(), "byte_size")
        }
    })
}
