//! Two things for the build.
//!
//! Integration tests load cache plugins and backends that call back into the test
//! executable, which must therefore export the ABI's functions like the nereid binary.
//!
//! The soname stub: an empty shared object whose `DT_SONAME` is a placeholder.
//! Backend libraries name Triton's core library as needed (`libtritonserver.so`, or a
//! hashed name in wheels); before loading one, Nereid writes a copy of this stub with
//! that name as its soname and loads it, so the dynamic loader finds the dependency
//! already there and every `TRITON*` symbol still resolves to Nereid's own exports.

use std::path::PathBuf;
use std::process::Command;

/// Must match `backend::soname::PLACEHOLDER`.
const PLACEHOLDER: &str = "libnereid-soname-placeholder-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.so";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for prefix in ["TRITONBACKEND_", "TRITONCACHE_", "TRITONSERVER_"] {
        println!("cargo:rustc-link-arg-tests=-Wl,--export-dynamic-symbol={prefix}*");
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let source = out.join("soname_stub.c");
    std::fs::write(
        &source,
        "/* Nereid's soname stub: no code, only a name. */\n",
    )
    .expect("write the stub's source");
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let status = Command::new(&compiler)
        .args(["-shared", "-fPIC", "-nostdlib"])
        .arg(format!("-Wl,-soname,{PLACEHOLDER}"))
        .arg("-o")
        .arg(out.join("soname_stub.so"))
        .arg(&source)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler '{compiler}': {e}"));
    assert!(status.success(), "building the soname stub failed");
}
