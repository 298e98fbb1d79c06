"""CUDA shared memory extension (reference section 2): register / status /
unregister over HTTP and gRPC, and tensors passed through CUDA regions.

Two servers:
- the session server, on a machine without the CUDA driver (this test
  machine and CI): the endpoints answer as Triton's CPU builds do (status
  empty, unregister succeeds, the extension is listed) and registering fails
  with "CUDA is not available on this server";
- a server whose CUDA driver is `fake_cuda/fake_cuda.c`, a test double of
  libcuda.so.1 loaded through NEREID_CUDA_LIBRARY, whose "device memory" is a
  POSIX shared-memory object named by the IPC handle. It drives Nereid's real
  registry code (handle decoding, device selection, bounds checks against the
  allocation, device-to-host copies of inputs and host-to-device copies of
  outputs, close on unregister) with tritonclient's register calls, but it is
  not a GPU test: that needs the device machine and
  `tritonclient.utils.cuda_shared_memory`.

Deliberate differences from Triton (marked again where tested): the
not-available message says why (the driver could not be loaded, or cuInit
failed) instead of Triton's "GPUs not supported".
"""

import base64
import ctypes
import json
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from conftest import EXAMPLE_MODELS

F32 = np.float32
A = np.array([[1.0, 2.0, 3.0, 4.0]], F32)
B = np.array([[0.5, -1.0, 10.0, 2.25]], F32)
def bad_handle(name):
    # Triton's "invalid args" for a handle it cannot open (L0_grpc's aio test matches it).
    return (f"failed to register shared memory region '{name}': invalid args "
            "('raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t)")


def has_real_cuda():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def handle_for(key):
    """The fake driver's IPC handle: the shm object's name in 64 bytes."""
    raw = key.encode().ljust(64, b"\0")
    assert len(raw) == 64
    return raw


@pytest.fixture
def cuda_server(start_server, fake_cuda):
    return start_server(
        EXAMPLE_MODELS,
        "--allow-client-shm=true",
        env={"NEREID_CUDA_LIBRARY": fake_cuda, "FAKE_CUDA_DEVICES": "2"},
    )


class Device:
    """A fake device allocation: a POSIX shm object the test can read and write."""

    def __init__(self, size):
        self.key = f"/nereid_cuda_{uuid.uuid4().hex[:8]}"
        self.size = size
        self.handle = shm.create_shared_memory_region(self.key[1:], self.key, size)
        shm.set_shared_memory_region(self.handle, [np.full(size // 4, np.nan, F32)])

    def write(self, offset, array):
        shm.set_shared_memory_region(self.handle, [np.ascontiguousarray(array)], offset=offset)

    def read(self, offset, shape):
        return shm.get_contents_as_numpy(self.handle, F32, shape, offset=offset).copy()

    def raw_handle(self):
        return handle_for(self.key)


@pytest.fixture
def devices():
    made = []

    def create(size):
        made.append(Device(size))
        return made[-1]

    yield create
    for d in made:
        shm.destroy_shared_memory_region(d.handle)


def register(client, name, raw, device_id, byte_size):
    """Both clients take the base64 text of the handle, as
    tritonclient.utils.cuda_shared_memory.get_raw_handle returns it."""
    client.register_cuda_shared_memory(name, base64.b64encode(raw), device_id, byte_size)


def clients(srv):
    return [("http", srv.http_client()), ("grpc", srv.grpc_client())]


# --- a server without CUDA ------------------------------------------------------


def test_extension_is_listed(server):
    assert "cuda_shared_memory" in server.request("GET", "/v2").json()["extensions"]


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_without_cuda_status_is_empty_and_unregister_succeeds(server, proto):
    client = server.http_client() if proto == "http" else server.grpc_client()
    status = client.get_cuda_shared_memory_status()
    assert (status == []) if proto == "http" else (len(status.regions) == 0)
    client.unregister_cuda_shared_memory()
    client.unregister_cuda_shared_memory("never_registered")


@pytest.mark.skipif(has_real_cuda(), reason="this machine has a CUDA driver")
@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_without_cuda_register_fails_clearly(server, error_of, proto):
    client = server.http_client() if proto == "http" else server.grpc_client()
    e = error_of(register, client, "nocuda", handle_for("/x"), 0, 64)
    assert e.status() == ("400" if proto == "http" else "StatusCode.INVALID_ARGUMENT")
    # Triton: "failed to register CUDA shared memory region: 'nocuda', GPUs not supported".
    assert e.message().startswith(
        "failed to register CUDA shared memory region 'nocuda': CUDA is not available on this server ("
    ), e.message()
    status = client.get_cuda_shared_memory_status()
    assert (status == []) if proto == "http" else (len(status.regions) == 0)


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_handle_must_be_64_bytes(server, error_of, proto):
    client = server.http_client() if proto == "http" else server.grpc_client()
    e = error_of(register, client, "short", b"\1" * 63, 0, 64)
    assert e.message() == bad_handle("short")
    if proto == "grpc":
        # Neither a name nor a handle: the handle is looked at first, as Triton's gRPC
        # handler opens it first (L0_grpc's python_grpc_aio_test).
        e = error_of(register, client, "", b"", 0, 0)
        assert e.message() == bad_handle(""), e.message()


def test_register_body_errors(server):
    def post(path, body):
        return server.request("POST", path, body=json.dumps(body).encode())

    r = post("/v2/cudasharedmemory/region/r/register", {"device_id": 0, "byte_size": 4})
    assert (r.status, r.json()) == (400, {"error": "Shared memory register request has no 'raw_handle' field"})
    r = post("/v2/cudasharedmemory/region/r/register", {"raw_handle": {"b64": "AAAA"}, "device_id": 0})
    assert (r.status, r.json()) == (400, {"error": "Shared memory register request has no 'byte_size' field"})
    r = post("/v2/cudasharedmemory/region/r/register", {"raw_handle": {"b64": "!!not base64!!"}, "byte_size": 4})
    assert (r.status, r.json()) == (400, {"error": bad_handle("r")})
    r = post("/v2/cudasharedmemory/register", {"raw_handle": {"b64": "AAAA"}, "byte_size": 4})
    assert (r.status, r.json()) == (
        400,
        {"error": "'region name' is necessary to register cuda shared memory region"},
    )
    r = server.request("GET", "/v2/cudasharedmemory/region/zz/status")
    assert (r.status, r.json()) == (404, {"error": "Unable to find CUDA shared memory region: 'zz'"})


# --- a server whose driver is the test double ------------------------------------


def test_register_status_unregister(cuda_server, devices):
    d = devices(64)
    http, grpc = cuda_server.http_client(), cuda_server.grpc_client()
    register(http, "c1", d.raw_handle(), 1, 64)
    register(grpc, "c2", d.raw_handle(), 0, 32)
    assert sorted(http.get_cuda_shared_memory_status(), key=lambda r: r["name"]) == [
        {"name": "c1", "device_id": 1, "byte_size": 64},
        {"name": "c2", "device_id": 0, "byte_size": 32},
    ]
    one = grpc.get_cuda_shared_memory_status("c1").regions["c1"]
    assert (one.name, one.device_id, one.byte_size) == ("c1", 1, 64)
    http.unregister_cuda_shared_memory("c1")
    assert [r["name"] for r in http.get_cuda_shared_memory_status()] == ["c2"]
    grpc.unregister_cuda_shared_memory()
    assert http.get_cuda_shared_memory_status() == []


@pytest.mark.parametrize("proto", ["http-binary", "http-json", "grpc"])
def test_inputs_and_outputs_in_cuda_memory(cuda_server, devices, proto):
    d = devices(128)
    d.write(0, A)
    d.write(16, B)
    client = cuda_server.http_client() if proto.startswith("http") else cuda_server.grpc_client()
    mod = httpclient if proto.startswith("http") else grpcclient
    register(client, "io", d.raw_handle(), 0, 128)
    inputs = [mod.InferInput("INPUT0", [1, 4], "FP32"), mod.InferInput("INPUT1", [1, 4], "FP32")]
    inputs[0].set_shared_memory("io", 16)
    inputs[1].set_shared_memory("io", 16, 16)
    if mod is httpclient:
        outputs = [
            mod.InferRequestedOutput("OUTPUT0", binary_data=proto == "http-binary"),
            mod.InferRequestedOutput("OUTPUT1", binary_data=proto == "http-binary"),
        ]
    else:
        outputs = [mod.InferRequestedOutput("OUTPUT0"), mod.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory("io", 16, 64)
    outputs[1].set_shared_memory("io", 16, 96)
    result = client.infer("add_sub", inputs, outputs=outputs)
    # The data is in the region, not the body.
    if mod is httpclient:
        assert "data" not in result.get_output("OUTPUT0")
        assert "binary_data_size" not in result.get_output("OUTPUT0").get("parameters", {})
    else:
        assert all(len(c) == 0 for c in result.get_response().raw_output_contents)
    np.testing.assert_array_equal(d.read(64, [1, 4]), A + B)
    np.testing.assert_array_equal(d.read(96, [1, 4]), A - B)
    client.unregister_cuda_shared_memory("io")


def test_registration_errors(cuda_server, devices, error_of):
    d = devices(64)
    http, grpc = cuda_server.http_client(), cuda_server.grpc_client()
    e = error_of(register, http, "dev", d.raw_handle(), 5, 64)
    assert e.message() == (
        "failed to register CUDA shared memory region 'dev': device 5 does not exist (this server sees 2)"
    )
    e = error_of(register, grpc, "big", d.raw_handle(), 0, 65)
    assert e.status() == "StatusCode.INVALID_ARGUMENT"
    assert e.message() == (
        "failed to register CUDA shared memory region 'big': byte_size 65 exceeds the CUDA allocation (64 bytes)"
    )
    e = error_of(register, http, "gone", handle_for("/nereid_cuda_missing"), 0, 64)
    assert e.message() == (
        "failed to register CUDA shared memory region 'gone': unable to open the CUDA IPC handle: "
        "invalid resource handle (CUDA error 400)"
    )
    assert http.get_cuda_shared_memory_status() == []


def test_one_name_space_for_both_kinds(cuda_server, devices, error_of):
    d = devices(64)
    http, grpc = cuda_server.http_client(), cuda_server.grpc_client()
    sys_region = shm.create_shared_memory_region("sys_for_cuda_test", f"/nereid_sys_{uuid.uuid4().hex[:8]}", 64)
    try:
        http.register_system_shared_memory("shared_name", sys_region._shm_key, 64)
        e = error_of(register, grpc, "shared_name", d.raw_handle(), 0, 64)
        assert (e.status(), e.message()) == (
            "StatusCode.ALREADY_EXISTS",
            "shared memory region 'shared_name' already in manager",
        )
        e = error_of(http.get_cuda_shared_memory_status, "shared_name")
        assert (e.status(), e.message()) == (
            "400",
            "The region named 'shared_name' is registered as system shared memory, not CUDA shared memory",
        )
        register(http, "cuda_only", d.raw_handle(), 0, 64)
        e = error_of(grpc.get_system_shared_memory_status, "cuda_only")
        assert e.message() == (
            "The region named 'cuda_only' is registered as CUDA shared memory, not system shared memory"
        )
        # Unregistering one kind leaves the other alone, by name and all at once.
        http.unregister_cuda_shared_memory("shared_name")
        http.unregister_cuda_shared_memory()
        assert [r["name"] for r in http.get_system_shared_memory_status()] == ["shared_name"]
        assert http.get_cuda_shared_memory_status() == []
        http.unregister_system_shared_memory()
    finally:
        shm.destroy_shared_memory_region(sys_region)


def test_input_window_checked_against_cuda_region(cuda_server, devices, error_of):
    d = devices(32)
    client = cuda_server.grpc_client()
    register(client, "small", d.raw_handle(), 0, 32)
    inputs = [grpcclient.InferInput("INPUT0", [1, 4], "FP32"), grpcclient.InferInput("INPUT1", [1, 4], "FP32")]
    inputs[0].set_shared_memory("small", 16, 24)
    inputs[1].set_shared_memory("small", 16)
    e = error_of(client.infer, "add_sub", inputs)
    assert e.message() == "Invalid offset + byte size for shared memory region: 'small'"
    # The server keeps serving.
    inputs[0].set_shared_memory("small", 16, 16)
    d.write(0, A)
    d.write(16, B)
    np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT0"), A + B)
