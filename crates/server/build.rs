//! The nereid executable exports the C ABI's functions so the cache plugins it loads
//! resolve `TRITONCACHE_*` and `TRITONSERVER_*` to them (the executable comes first in
//! symbol lookup, even for a plugin that names libtritonserver.so as needed). main.rs
//! references the functions so they are linked in at all.

fn main() {
    for prefix in ["TRITONBACKEND_", "TRITONCACHE_", "TRITONSERVER_"] {
        println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol={prefix}*");
    }
}
