//! Compiles tests/c/inprocess.c (its own prototypes, no Triton header) against
//! libtritonserver.so and runs it on the test repository: once without CUDA, once with
//! the CUDA driver test double (tests/python/fake_cuda) for its GPU memory paths.

use std::path::PathBuf;
use std::process::Command;

use crate::fixture;

/// The directory holding libtritonserver.so: next to this test executable (`deps`), as
/// cargo builds the cdylib with the library for its tests.
fn library_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .find(|dir| dir.join("libtritonserver.so").is_file())
        .map(PathBuf::from)
}

#[test]
fn c_program_drives_the_in_process_server() {
    if !fixture::onnx_runtime_available() {
        return;
    }
    let Some(lib) = library_dir() else {
        fixture::skip("libtritonserver.so not found next to the test executable");
        return;
    };
    if Command::new("cc").arg("--version").output().is_err() {
        fixture::skip("no C compiler (cc)");
        return;
    }
    let out = tempfile::tempdir().expect("temporary directory");
    let exe = out.path().join("inprocess");
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c/inprocess.c");
    let compiled = Command::new("cc")
        .args(["-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&source)
        .arg(format!("-L{}", lib.display()))
        .arg("-ltritonserver")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lpthread")
        .output()
        .expect("run cc");
    assert!(
        compiled.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&compiled.stderr)
    );
    let repository = fixture::repository();
    let fake_cuda = out.path().join("libfakecuda.so");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&fake_cuda)
        .arg(fixture::workspace_root().join("tests/python/fake_cuda/fake_cuda.c"))
        .status()
        .expect("run cc");
    assert!(
        built.success(),
        "building the CUDA driver test double failed"
    );
    let runs = [
        (out.path().join("no-libcuda.so"), None),
        (fake_cuda, Some("fake-gpu")),
    ];
    for (driver, mode) in runs {
        // Cargo's LD_LIBRARY_PATH may name target/release, whose copy of the library is
        // only refreshed by `cargo build`: the program must load the one built for this test.
        let run = Command::new(&exe)
            .env_remove("LD_LIBRARY_PATH")
            .env("NEREID_CUDA_LIBRARY", &driver)
            .arg(repository.path())
            .args(mode)
            .current_dir(fixture::workspace_root())
            .output()
            .expect("run the C program");
        let stdout = String::from_utf8_lossy(&run.stdout);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(
            run.status.success() && stdout.contains("inprocess: OK"),
            "C program ({mode:?}) failed ({}):\n{stdout}\n{stderr}",
            run.status
        );
    }
}
