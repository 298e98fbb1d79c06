//! Integration tests load cache plugins that call back into the test executable, which
//! must therefore export the ABI's functions like the nereid binary does.

fn main() {
    for prefix in ["TRITONCACHE_", "TRITONSERVER_"] {
        println!("cargo:rustc-link-arg-tests=-Wl,--export-dynamic-symbol={prefix}*");
    }
}
