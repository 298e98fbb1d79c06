//! Registry tests over real POSIX shared memory. On Linux a POSIX shared-memory object
//! `/<name>` is the file `/dev/shm/<name>`, so the tests make and shrink objects as a
//! client would, with plain file calls.

use std::collections::HashMap;
use std::io::Write;

use super::*;

/// A shared-memory object of `size` bytes filled with 0, 1, 2, ..., removed on drop.
struct Object(String);

impl Object {
    fn new(size: usize) -> Self {
        let key = format!("/nereid_unit_{}_{size}", std::process::id());
        let data: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let mut file = std::fs::File::create(Self::path(&key)).expect("creates the object");
        file.write_all(&data).expect("fills it");
        Self(key)
    }

    fn path(key: &str) -> String {
        format!("/dev/shm{key}")
    }

    fn key(&self) -> &str {
        &self.0
    }
}

impl Drop for Object {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(Self::path(&self.0));
    }
}

/// A registry clients may register in, with the default limits.
fn open_registry() -> ShmRegistry {
    ShmRegistry::with_limits(ShmLimits {
        allow_clients: true,
        ..ShmLimits::default()
    })
}

fn shm(region: &str, offset: u64, byte_size: u64) -> ShmRef {
    ShmRef {
        region: region.into(),
        offset,
        byte_size,
    }
}

#[test]
fn registers_at_unaligned_offsets_and_reads_in_place() {
    let object = Object::new(10_000);
    let registry = open_registry();
    registry
        .register_system("r", object.key(), 4100, 64)
        .expect("registers");
    let bytes = registry.input(&shm("r", 2, 3)).expect("inside");
    assert_eq!(
        &bytes[..],
        &[(4102 % 256) as u8, (4103 % 256) as u8, (4104 % 256) as u8]
    );
    let status = registry.system_status(None).expect("status");
    assert_eq!(status[0].offset, 4100);
    let e = registry
        .register_system("r", object.key(), 0, 8)
        .expect_err("twice");
    assert_eq!(e.kind(), ErrorKind::AlreadyExists);
}

#[test]
fn bounds_and_names_are_checked() {
    let object = Object::new(128);
    let registry = open_registry();
    let e = registry
        .register_system("big", object.key(), 100, 64)
        .expect_err("too big");
    assert!(
        e.message()
            .starts_with("failed to register shared memory region 'big': invalid args"),
        "{}",
        e.message()
    );
    for key in ["/../etc/passwd", "a/b", "", "/", "///"] {
        let e = registry
            .register_system("x", key, 0, 8)
            .expect_err("bad key");
        assert!(
            e.message().starts_with(&format!(
                "cannot register shared memory region 'x' - invalid shm key '{key}'"
            )),
            "{}",
            e.message()
        );
    }
    for key in [
        "triton_python_backend_shm_region_1",
        "///triton_python_backend_shm_region_1",
    ] {
        let e = registry
            .register_system("x", key, 0, 8)
            .expect_err("reserved key");
        assert_eq!(
            e.message(),
            format!("cannot register shared memory region 'x' with key '{key}' as the key contains the reserved prefix 'triton_python_backend_shm_region_'")
        );
    }
    let e = registry
        .register_system("x", "/nereid_missing_object", 0, 8)
        .expect_err("missing");
    assert_eq!(
        e.message(),
        "Unable to open shared memory region: '/nereid_missing_object'"
    );
    registry
        .register_system("r", object.key(), 0, 16)
        .expect("registers");
    assert_eq!(
        registry
            .input(&shm("r", 16, 1))
            .expect_err("offset")
            .message(),
        "Invalid offset for shared memory region: 'r'"
    );
    assert_eq!(
        registry.input(&shm("r", 8, 9)).expect_err("end").message(),
        "Invalid offset + byte size for shared memory region: 'r'"
    );
    assert_eq!(
        registry
            .input(&shm("r", 8, u64::MAX - 4))
            .expect_err("overflow")
            .message(),
        format!("Integer overflow detected: byte_size ({}) + offset (8) exceeds maximum value ({}) for region 'r'", u64::MAX - 4, u64::MAX)
    );
    assert_eq!(
        registry.input(&shm("q", 0, 1)).expect_err("unknown").kind(),
        ErrorKind::NotFound
    );
}

/// Output `OUT` holding `data`, in host memory.
fn output(data: &[u8]) -> OutputTensor {
    OutputTensor {
        name: "OUT".into(),
        datatype: nereid_proto::DataType::Uint8,
        shape: vec![data.len() as i64],
        data: Bytes::copy_from_slice(data),
        device: None,
    }
}

#[test]
fn outputs_are_written_and_unregister_defers_the_unmap() {
    let object = Object::new(64);
    let registry = open_registry();
    registry
        .register_system("r", object.key(), 0, 64)
        .expect("registers");
    let target = registry.output(&shm("r", 8, 4)).expect("inside");
    let view = registry.input(&shm("r", 8, 4)).expect("inside");
    registry
        .unregister(RegionKind::System, Some("r"))
        .expect("unregisters");
    assert!(registry.system_status(Some("r")).is_err());
    target.write(&output(&[9, 9, 9, 9])).expect("fits");
    assert_eq!(&view[..], &[9, 9, 9, 9], "still mapped while in use");
    let e = target.write(&output(&[0; 5])).expect_err("too small");
    assert_eq!(
        e.message(),
        "shared memory size specified with the request for output 'OUT' (4 bytes) should be at least 5 bytes to hold the results"
    );
}

#[test]
fn the_frontends_lend_an_outputs_window_and_copy_nothing_written_there() {
    let object = Object::new(96);
    let registry = open_registry();
    registry
        .register_system("r", object.key(), 0, 96)
        .expect("registers");
    let window = registry.output(&shm("r", 8, 4)).expect("inside");
    let query = frontend_query(&HashMap::from([("OUT".to_string(), window)]));
    let pinned = Placement {
        kind: MemoryKind::CpuPinned,
        id: 1,
    };
    // Asked where OUT goes: its region's memory (host memory here) when it fits.
    assert_eq!(
        query.query(Some("OUT"), Some(4), pinned).ok(),
        Some(Placement::CPU)
    );
    assert_eq!(
        query.query(Some("OUT"), Some(5), pinned).ok(),
        Some(Placement::CPU)
    );
    assert_eq!(query.query(None, None, pinned).ok(), Some(Placement::CPU));
    assert!(query.lends());
    assert!(query.lend("OUT", 5).is_none(), "more than the window takes");
    assert!(query.lend("OTHER", 1).is_none(), "not in a region");
    let target = query.lend("OUT", 4).expect("fits");
    let (placement, address) = target.lend(4).expect("fits");
    assert_eq!(placement, Placement::CPU);
    assert!(target.lend(5).is_none());
    // What the backend wrote at `address` is the region's bytes (0, 1, 2, ... at first).
    let (data, device) = target.written(4);
    assert!(device.is_none());
    assert_eq!(data.as_ptr() as u64, address);
    assert_eq!(&data[..], &[8, 9, 10, 11]);
    let in_place = OutputTensor {
        data,
        ..output(&[])
    };
    assert!(target.holds(&in_place));
    target.write(&in_place).expect("nothing to copy");
    // Bytes of the server's own are copied in.
    let copied = output(&[1, 2, 3, 4]);
    assert!(!target.holds(&copied));
    target.write(&copied).expect("fits");
    assert_eq!(
        &registry.input(&shm("r", 8, 4)).expect("inside")[..],
        &[1, 2, 3, 4]
    );
    // A model whose outputs must stay the server's own is told the same and lent nothing.
    let unlent = crate::output_query::without_lending(query);
    assert!(unlent.lend("OUT", 4).is_none());
    assert!(!unlent.lends());
    assert_eq!(
        unlent.query(Some("OUT"), Some(4), pinned).ok(),
        Some(Placement::CPU)
    );
}

#[test]
fn parameters_resolve_with_one_message_for_both_frontends() {
    let p = |region: Option<&str>, offset, byte_size| ShmParams {
        region: region.map(str::to_string),
        offset,
        byte_size,
    };
    assert_eq!(p(None, None, None).resolve("T").expect("none"), None);
    assert!(p(Some("r"), None, None)
        .resolve("T")
        .expect_err("size")
        .message()
        .contains("must be specified along with"));
    assert!(p(None, Some(4), None)
        .resolve("T")
        .expect_err("region")
        .message()
        .contains("can not be specified without"));
    assert_eq!(
        p(Some("r"), None, Some(8)).resolve("T").expect("ok"),
        Some(shm("r", 0, 8))
    );
}

#[test]
fn cuda_handle_must_be_64_bytes_and_status_starts_empty() {
    let registry = open_registry();
    let e = registry
        .register_cuda("c", &[0; 63], 0, 16)
        .expect_err("short handle");
    assert_eq!(
        e.message(),
        "failed to register shared memory region 'c': invalid args ('raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t)"
    );
    assert!(registry.cuda_status(None).expect("status").is_empty());
    registry
        .unregister(RegionKind::Cuda, Some("c"))
        .expect("unregisters");
}

impl Object {
    /// What a client does to its own object: shrink it under the registered region.
    fn truncate(&self, size: usize) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(Self::path(&self.0))
            .and_then(|file| file.set_len(size as u64))
            .expect("shrinks the object");
    }
}

#[test]
fn a_region_whose_object_shrank_is_an_error_not_a_sigbus() {
    let object = Object::new(3 * 4096);
    let registry = open_registry();
    registry
        .register_system("r", object.key(), 0, 3 * 4096)
        .expect("registers");
    object.truncate(4096);
    let error = registry.input(&shm("r", 8192, 16)).expect_err("shrunk");
    assert_eq!(error.kind(), ErrorKind::InvalidArg);
    assert!(
        error.message().contains(
            "shared memory region 'r' is no longer usable: its object is now 4096 bytes, smaller than the 12288 bytes"
        ),
        "{}",
        error.message()
    );
    assert!(registry.output(&shm("r", 0, 16)).is_err());
}

#[test]
fn a_truncation_under_a_write_costs_that_write_an_error() {
    // Object keys are per size: a size no other test uses.
    let object = Object::new(3 * 4096 + 8);
    let registry = open_registry();
    registry
        .register_system("w", object.key(), 0, 3 * 4096)
        .expect("registers");
    // The window was checked while the object was whole; it shrinks before the copy, as
    // when a client truncates while its request runs. The copy into the lost pages
    // raises SIGBUS, which is repaired and answered as an error.
    let target = registry.output(&shm("w", 4096, 8192)).expect("whole");
    object.truncate(4096);
    let error = target.write(&output(&[7u8; 8192])).expect_err("damaged");
    assert!(
        error
            .message()
            .contains("truncated while the server was using it"),
        "{}",
        error.message()
    );
    // The region stays unusable until registered again; a new registration works.
    assert!(registry.input(&shm("w", 0, 16)).is_err());
    registry
        .unregister(RegionKind::System, Some("w"))
        .expect("unregisters");
    registry
        .register_system("w", object.key(), 0, 4096)
        .expect("registers again");
    assert_eq!(
        registry.input(&shm("w", 0, 4)).expect("usable")[..],
        [0, 1, 2, 3]
    );
}

#[test]
fn registrations_beyond_the_limits_are_refused() {
    let object = Object::new(4096);
    let registry = ShmRegistry::with_limits(ShmLimits {
        allow_clients: true,
        max_regions: 2,
        max_total_bytes: 6000,
    });
    registry
        .register_system("a", object.key(), 0, 4096)
        .expect("first");
    let error = registry
        .register_system("b", object.key(), 0, 4096)
        .expect_err("too many bytes");
    assert!(
        error.message().contains("--shm-max-total-bytes"),
        "{}",
        error.message()
    );
    registry
        .register_system("b", object.key(), 0, 1000)
        .expect("fits");
    let error = registry
        .register_system("c", object.key(), 0, 10)
        .expect_err("too many regions");
    assert!(
        error.message().contains("2 regions are registered"),
        "{}",
        error.message()
    );
    registry
        .unregister(RegionKind::System, Some("a"))
        .expect("unregisters");
    registry
        .register_system("c", object.key(), 0, 10)
        .expect("room again");
}

#[test]
fn a_request_whose_input_region_is_truncated_while_it_runs_is_failed() {
    // Object keys are per size: a size no other test uses.
    let object = Object::new(2 * 4096 + 16);
    let registry = open_registry();
    let nothing = crate::testing::request("m", "", Vec::new());
    assert!(
        registry.watch_inputs(&nothing.inputs).is_none(),
        "no region, no watch"
    );
    registry
        .register_system("in", object.key(), 0, 2 * 4096)
        .expect("registers");
    let data = registry.input(&shm("in", 4096, 64)).expect("whole");
    let mut request = crate::testing::request("m", "", Vec::new());
    request.inputs.push(crate::request::InputTensor {
        name: "INPUT0".into(),
        datatype: nereid_proto::DataType::Uint8,
        shape: vec![64],
        data: data.clone(),
        device: None,
    });
    let watch = registry
        .watch_inputs(&request.inputs)
        .expect("a region is registered");
    assert!(watch.verify().is_ok());
    // The client truncates while the model reads the input: the read sees zeros.
    object.truncate(4096);
    assert_eq!(data[..4], [0, 0, 0, 0]);
    let error = watch.verify().expect_err("read a lost page");
    assert!(error
        .message()
        .contains("truncated while the request was using it"));
}

#[test]
fn clients_may_not_register_or_unregister_by_default_but_status_answers() {
    let object = Object::new(64);
    let registry = ShmRegistry::default();
    let refused = |result: Result<()>| {
        let error = result.expect_err("refused");
        assert_eq!(error.kind(), ErrorKind::Unsupported);
        assert_eq!(
            error.message(),
            "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
        );
    };
    refused(registry.client_access());
    refused(registry.register_system("r", object.key(), 0, 8));
    refused(registry.register_cuda("c", &[0; 64], 0, 8));
    refused(registry.unregister(RegionKind::System, None));
    refused(registry.unregister(RegionKind::Cuda, Some("c")));
    assert_eq!(registry.system_status(None).expect("status"), vec![]);
    assert_eq!(registry.cuda_status(None).expect("status"), vec![]);
    let error = registry
        .input(&shm("r", 0, 8))
        .expect_err("nothing registered");
    assert_eq!(error.kind(), ErrorKind::NotFound);
    assert_eq!(error.message(), "Unable to find shared memory region: 'r'");
}
