//! Loading C libraries (cache plugins, backends, batch strategies): opening them where
//! they can find this library's `TRITON*` functions, the loader's own error text, and
//! entry point lookup with Triton's message when a required one is missing.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::path::Path;
use std::sync::Once;

use libloading::os::unix::{Library, Symbol, RTLD_LOCAL, RTLD_NOW};
use nereid_core::{Error, ErrorKind, Result};

/// Opens a plugin library (a backend, a cache, a batch strategy) privately, after making
/// sure the `TRITONSERVER_*`/`TRITONBACKEND_*`/`TRITONCACHE_*` functions it calls resolve
/// to this library's. In the nereid binary they are the executable's exports. A program
/// that loaded `libtritonserver.so` privately — Python imports an extension module with
/// `RTLD_LOCAL`, and Triton's `tritonserver` package links this library from one — would
/// leave them out of the process's global scope, and every plugin would fail with
/// "undefined symbol"; so this library is promoted to the global scope first, once.
///
/// # Safety
/// Opening a library runs its initializers: `path` must be a library meant to be loaded
/// into this server.
pub unsafe fn open_plugin(path: &Path) -> std::result::Result<Library, libloading::Error> {
    static PROMOTED: Once = Once::new();
    PROMOTED.call_once(promote_this_library);
    // SAFETY: the caller's contract.
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }
}

/// Re-opens the object holding this code with `RTLD_GLOBAL | RTLD_NOLOAD`: nothing is
/// loaded, the already loaded object joins the global scope (and stays loaded, which it
/// does anyway while its code runs). A failure leaves things as they were: plugins then
/// fail with the loader's own message.
fn promote_this_library() {
    // SAFETY: `Dl_info` is plain data; zero is a valid starting value for dladdr to fill.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let address = promote_this_library as *const c_void;
    // SAFETY: `address` is a function of this object and `info` is writable.
    let found = unsafe { libc::dladdr(address, &mut info) } != 0 && !info.dli_fname.is_null();
    if !found {
        tracing::warn!(
            "cannot find this library's own path: plugins may not resolve TRITON* functions"
        );
        return;
    }
    // SAFETY: `dli_fname` is non-null and NUL-terminated (dladdr's contract).
    let path = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    if is_main_program(path) {
        // The nereid binary: its exports are in the global scope from the start, and
        // the loader cannot re-open a main program by its path.
        return;
    }
    // SAFETY: `dli_fname` is the NUL-terminated path of an object already loaded;
    // RTLD_NOLOAD re-opens it without running anything.
    let handle = unsafe {
        libc::dlopen(
            info.dli_fname,
            libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_GLOBAL,
        )
    };
    if handle.is_null() {
        tracing::warn!(
            "cannot make this library's TRITON* functions global: plugins may fail to load"
        );
    }
}

/// Whether `path` (as dladdr names an object) is this process's executable.
fn is_main_program(path: &std::ffi::CStr) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let object = Path::new(std::ffi::OsStr::from_bytes(path.to_bytes()));
    match (std::env::current_exe(), object.canonicalize()) {
        (Ok(exe), Ok(object)) => exe.canonicalize().is_ok_and(|exe| exe == object),
        _ => false,
    }
}

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
