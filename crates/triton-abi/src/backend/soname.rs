//! Satisfies a backend library's dependency on Triton's core library without loading
//! Triton: for each `libtritonserver*` name the library needs (`DT_NEEDED`), a copy of
//! the soname stub (see build.rs) carrying that name is loaded first. The dynamic loader
//! matches the dependency by soname and loads nothing else, and the library's `TRITON*`
//! calls resolve to this process's exports (the nereid executable, or the embedding
//! program's libtritonserver.so), which come first in symbol lookup.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::path::Path;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use nereid_core::{Error, Result};
use parking_lot::Mutex;

use crate::dl::dlerror_text;

/// The stub's soname; build.rs uses the same text.
const PLACEHOLDER: &str = "libnereid-soname-placeholder-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.so";

/// The stub, built by build.rs.
const STUB: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/soname_stub.so"));

/// Stubs loaded so far, by the name they provide; kept for the process's life.
static PROVIDED: Mutex<Option<HashMap<String, Library>>> = Mutex::new(None);

/// Whether `name` is a Triton core library name (`libtritonserver.so`,
/// `libtritonserver-717102f0.so`, …).
fn is_core_library(name: &str) -> bool {
    name.starts_with("libtritonserver") && name.contains(".so")
}

/// Provides every Triton core library `library` needs, before it is loaded.
pub fn provide_core_libraries(library: &Path) -> Result<()> {
    let bytes = std::fs::read(library)
        .map_err(|e| Error::invalid_arg(format!("cannot read {}: {e}", library.display())))?;
    let needed = super::elf::needed_libraries(&bytes).map_err(|e| {
        Error::invalid_arg(format!(
            "{} is not a loadable library: {e}",
            library.display()
        ))
    })?;
    for name in needed.into_iter().filter(|n| is_core_library(n)) {
        provide(&name)?;
    }
    Ok(())
}

/// Loads a stub whose soname is `name`, once.
fn provide(name: &str) -> Result<()> {
    let mut provided = PROVIDED.lock();
    let provided = provided.get_or_insert_with(HashMap::new);
    if provided.contains_key(name) {
        return Ok(());
    }
    if name.len() > PLACEHOLDER.len() || name.contains('/') {
        return Err(Error::invalid_arg(format!(
            "cannot provide the core library '{name}' a backend needs: the name is too long"
        )));
    }
    let stub = renamed_stub(name)?;
    let dir = tempfile::Builder::new()
        .prefix("nereid-soname-")
        .tempdir()
        .map_err(|e| Error::internal(format!("cannot create a directory for '{name}': {e}")))?;
    let path = dir.path().join(name);
    std::fs::write(&path, stub)
        .map_err(|e| Error::internal(format!("cannot write {}: {e}", path.display())))?;
    // SAFETY: the stub has no code and no initializers; only its soname matters.
    let library = unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_LOCAL) }
        .map_err(|e| Error::internal(format!("cannot provide '{name}': {}", dlerror_text(&e))))?;
    tracing::debug!("providing '{name}' for backend libraries");
    provided.insert(name.to_string(), library);
    Ok(())
}

/// The stub with its soname replaced by `name` (padded with NULs to the same length).
fn renamed_stub(name: &str) -> Result<Vec<u8>> {
    let mut stub = STUB.to_vec();
    let placeholder = PLACEHOLDER.as_bytes();
    let at = stub
        .windows(placeholder.len())
        .position(|w| w == placeholder)
        .ok_or_else(|| Error::internal("the soname stub has no placeholder"))?;
    let target = &mut stub[at..at + placeholder.len()];
    target.fill(0);
    target[..name.len()].copy_from_slice(name.as_bytes());
    Ok(stub)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_library_names_are_recognized() {
        assert!(is_core_library("libtritonserver.so"));
        assert!(is_core_library("libtritonserver-717102f0.so"));
        assert!(!is_core_library("libtriton_python.so"));
        assert!(!is_core_library("libc.so.6"));
    }

    #[test]
    fn a_renamed_stub_carries_the_name_as_its_soname() {
        let stub = renamed_stub("libtritonserver-717102f0.so").expect("renamed");
        assert_eq!(stub.len(), STUB.len());
        let text = String::from_utf8_lossy(&stub);
        assert!(text.contains("libtritonserver-717102f0.so\0"));
        assert!(!text.contains(PLACEHOLDER));
    }

    #[test]
    fn a_provided_name_satisfies_a_later_dependency() {
        provide("libtritonserver-nereidtest.so").expect("provided");
        provide("libtritonserver-nereidtest.so").expect("only once");
        // The loader now finds the name among loaded objects, without searching.
        // SAFETY: the stub has no code.
        let again = unsafe { Library::open(Some("libtritonserver-nereidtest.so"), RTLD_NOW) };
        assert!(again.is_ok(), "{:?}", again.err());
    }
}
