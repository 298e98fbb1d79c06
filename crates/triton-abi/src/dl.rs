//! Loading C libraries (cache plugins, backends): the loader's own error text and entry
//! point lookup with Triton's message when a required one is missing.

use libloading::os::unix::{Library, Symbol};
use nereid_core::{Error, ErrorKind, Result};

/// The loader's own words for a failed `dlopen` or `dlsym` (`dlerror()`, which names the
/// library), rather than libloading's summary.
pub fn dlerror_text(error: &libloading::Error) -> String {
    std::error::Error::source(error).map_or_else(|| error.to_string(), |e| e.to_string())
}

/// Resolves a required entry point, with Triton's message when it is missing.
///
/// # Safety
/// `T` must be the entry point's C signature.
pub unsafe fn entry_point<T: Copy>(library: &Library, name: &str) -> Result<T> {
    // SAFETY: the caller names the right signature for `name`.
    let symbol: std::result::Result<Symbol<T>, _> = unsafe { library.get(name.as_bytes()) };
    symbol.map(|s| *s).map_err(|e| {
        Error::new(
            ErrorKind::NotFound,
            format!(
                "unable to find required entrypoint '{name}' in shared library: {}",
                dlerror_text(&e)
            ),
        )
    })
}

/// Resolves an optional entry point: `None` when the library does not define it.
///
/// # Safety
/// `T` must be the entry point's C signature.
pub unsafe fn optional_entry_point<T: Copy>(library: &Library, name: &str) -> Option<T> {
    // SAFETY: the caller names the right signature for `name`.
    let symbol: std::result::Result<Symbol<T>, _> = unsafe { library.get(name.as_bytes()) };
    symbol.ok().map(|s| *s)
}
