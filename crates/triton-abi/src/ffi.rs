//! Checks on what a C caller passes: null pointers and C strings become
//! `TRITONSERVER_Error`s instead of crashes.
#![allow(unsafe_code)]

use std::ffi::{c_char, CStr};

use crate::error::{invalid_arg, ErrorPtr};

/// `value` as a reference, or an invalid-argument error naming `what` when it is null.
///
/// # Safety
/// A non-null `value` must point to a live, properly aligned `T` for the returned lifetime.
pub unsafe fn reference<'a, T>(value: *const T, what: &str) -> Result<&'a T, ErrorPtr> {
    // SAFETY: the caller guarantees a non-null pointer is valid; null is checked here.
    unsafe { value.as_ref() }.ok_or_else(|| invalid_arg(format!("{what} must not be null")))
}

/// `value` as a mutable reference, or an invalid-argument error naming `what` when null.
///
/// # Safety
/// A non-null `value` must point to a live, properly aligned `T` that nothing else uses
/// for the returned lifetime.
pub unsafe fn reference_mut<'a, T>(value: *mut T, what: &str) -> Result<&'a mut T, ErrorPtr> {
    // SAFETY: the caller guarantees a non-null pointer is valid and unaliased.
    unsafe { value.as_mut() }.ok_or_else(|| invalid_arg(format!("{what} must not be null")))
}

/// The UTF-8 text of a C string, or an invalid-argument error naming `what` when it is
/// null or not UTF-8.
///
/// # Safety
/// A non-null `value` must point to a NUL-terminated string that lives for the returned
/// lifetime.
pub unsafe fn text<'a>(value: *const c_char, what: &str) -> Result<&'a str, ErrorPtr> {
    if value.is_null() {
        return Err(invalid_arg(format!("{what} must not be null")));
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let c = unsafe { CStr::from_ptr(value) };
    c.to_str()
        .map_err(|_| invalid_arg(format!("{what} is not valid UTF-8")))
}

/// Writes `value` through an out-parameter, or answers an invalid-argument error naming
/// `what` when the pointer is null.
///
/// # Safety
/// A non-null `out` must be valid for a write of `T`.
pub unsafe fn write<T>(out: *mut T, value: T, what: &str) -> Result<(), ErrorPtr> {
    if out.is_null() {
        return Err(invalid_arg(format!("{what} must not be null")));
    }
    // SAFETY: non-null and writable by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

/// Runs an ABI function body that reports failure as an error pointer: `Ok` becomes null
/// (Triton's success), `Err` the error. A panic inside becomes an internal error instead of
/// unwinding into C (which would abort the caller's process).
pub fn status(body: impl FnOnce() -> Result<(), ErrorPtr>) -> ErrorPtr {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => std::ptr::null_mut(),
        Ok(Err(e)) => e,
        Err(_) => crate::error::internal("internal error: a Nereid ABI call panicked"),
    }
}

/// Runs an ABI function body on the object behind a handle, checked for null, through
/// [`status`].
///
/// # Safety
/// A non-null `handle` must point to a live `T` for the duration of the call.
pub unsafe fn with<T>(
    handle: *const T,
    what: &str,
    body: impl FnOnce(&T) -> Result<(), ErrorPtr>,
) -> ErrorPtr {
    status(|| {
        // SAFETY: live or null by the caller's contract; null is checked.
        let object = unsafe { reference(handle, what) }?;
        body(object)
    })
}

/// Writes an out-parameter of an ABI call, checked for null. The C contract of every
/// exported function makes its out-parameters valid for a write or null.
pub(crate) fn put<T>(out: *mut T, value: T, what: &str) -> Result<(), ErrorPtr> {
    // SAFETY: an out-parameter from a C caller, valid or null (checked by `write`).
    unsafe { write(out, value, what) }
}

/// Writes an optional out-parameter: skipped when null, as Triton's getters allow.
pub(crate) fn put_optional<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: non-null, and valid for a write by the C caller's contract.
        unsafe { out.write(value) };
    }
}
