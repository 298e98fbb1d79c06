"""System shared memory extension (reference section 2): register / status /
unregister over HTTP and gRPC, tensors passed through POSIX shared memory in
both directions, and the error texts of every misuse.

Regions are created here with tritonclient's own helpers
(`tritonclient.utils.shared_memory`), registered with the clients'
`register_system_shared_memory`, and referenced from `InferInput` /
`InferRequestedOutput.set_shared_memory`, exactly as a Triton user would.

The session server is shared with other modules, so every test uses region
names derived from its own name and fresh shm keys, and the `regions` fixture
unregisters every system region and destroys every region it created at
teardown.

Deliberate differences from Triton 2.51 (each marked again where tested):
- a key that does not exist is a client error (400), not 500;
- a register offset that is not page-aligned works (Triton fails in mmap);
- keys that are not a plain POSIX shm name are refused up front;
- a region without 'shared_memory_byte_size' (or byte size/offset without a
  region) gets the same explicit message over HTTP as over gRPC;
- an output region too small for the result is a 400 (Triton: INTERNAL);
- an output's offset + byte size is checked against the region like an
  input's (Triton only checks the offset for outputs and can write past the
  region).
"""

import re
import threading
import time
import uuid

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

# (HTTP status, gRPC status) as the clients report them.
INVALID_ARG = ("400", "StatusCode.INVALID_ARGUMENT")
NOT_FOUND = ("404", "StatusCode.NOT_FOUND")
ALREADY_EXISTS = ("400", "StatusCode.ALREADY_EXISTS")

F32 = np.float32
A = np.array([[1.0, 2.0, 3.0, 4.0]], F32)
B = np.array([[0.5, -1.0, 10.0, 2.25]], F32)
A2 = np.arange(8, dtype=F32).reshape(2, 4)
B2 = np.array([[0.25, 1.0, -3.0, 7.5], [100.0, -0.5, 2.0, 8.0]], F32)


# The parameter errors, for INPUT0 (the same text over HTTP and gRPC).
BYTE_SIZE_REQUIRED = (
    "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor 'INPUT0'"
)
REGION_REQUIRED = (
    "'shared_memory_byte_size' can not be specified without 'shared_memory_region' parameter for tensor 'INPUT0'"
)
BYTE_SIZE_MISMATCH = (
    "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'add_sub'. "
    "Expected 16, got 12"
)


# --- regions -----------------------------------------------------------------


class Region:
    """One POSIX shared memory object created by the test (the client side)."""

    def __init__(self, name, key, size):
        self.name = name
        self.key = key
        self.size = size
        self.handle = shm.create_shared_memory_region(name, key, size)
        self.fill()

    def write(self, offset, *arrays):
        shm.set_shared_memory_region(self.handle, [np.ascontiguousarray(a) for a in arrays], offset=offset)

    def read(self, offset, shape, dtype=F32):
        # copy(): a view would pin the mapping and make destroy fail.
        return shm.get_contents_as_numpy(self.handle, dtype, shape, offset=offset).copy()

    def fill(self, value=np.nan):
        """Overwrite the whole object (with NaN by default), so that a result
        found there later was written by the server."""
        self.write(0, np.full(self.size // 4, value, F32))


def unique_key():
    return f"/nereid_test_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def regions(request, http_client):
    """regions(suffix, size) -> Region named '<test name>_<suffix>' with a fresh
    key. Teardown: unregister all system regions on the session server, then
    destroy every region created here."""
    tag = re.sub(r"[^A-Za-z0-9]+", "_", request.node.name).strip("_")
    made = []

    def create(suffix, size):
        region = Region(f"nereid_{tag}_{suffix}", unique_key(), size)
        made.append(region)
        return region

    yield create
    try:
        http_client.unregister_system_shared_memory()
    except InferenceServerException:
        pass  # a broken unregister-all fails its own test, not every teardown
    finally:
        for region in made:
            shm.destroy_shared_memory_region(region.handle)


# --- protocols ----------------------------------------------------------------


class Proto:
    """One way of talking to the server: 'http-binary', 'http-json' or 'grpc'."""

    def __init__(self, kind, client):
        self.kind = kind
        self.http = kind.startswith("http")
        self.mod = httpclient if self.http else grpcclient
        self.client = client
        self.binary = kind != "http-json"

    def code(self, codes):
        return codes[0] if self.http else codes[1]

    def register(self, region, byte_size=None, offset=0, name=None):
        self.client.register_system_shared_memory(
            region.name if name is None else name,
            region.key,
            region.size - offset if byte_size is None else byte_size,
            offset=offset,
        )

    def inline(self, name, value):
        inp = self.mod.InferInput(name, list(value.shape), "FP32")
        if self.http:
            inp.set_data_from_numpy(value, binary_data=self.binary)
        else:
            inp.set_data_from_numpy(value)
        return inp

    def from_shm(self, name, shape, region, byte_size, offset=0):
        inp = self.mod.InferInput(name, list(shape), "FP32")
        inp.set_shared_memory(region, byte_size, offset)
        return inp

    def output(self, name, region=None, byte_size=None, offset=0):
        if self.http:
            out = httpclient.InferRequestedOutput(name, binary_data=self.binary)
        else:
            out = grpcclient.InferRequestedOutput(name)
        if region is not None:
            out.set_shared_memory(region, byte_size, offset)
        return out

    def infer(self, inputs, outputs=None):
        return self.client.infer("add_sub", inputs, outputs=outputs)

    def assert_serving(self):
        result = self.infer([self.inline("INPUT0", A), self.inline("INPUT1", B)])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)

    def status(self, name=""):
        """Region status as a list of {name, key, offset, byte_size}, by name."""
        if self.http:
            entries = self.client.get_system_shared_memory_status(name)
            assert isinstance(entries, list), entries
        else:
            resp = self.client.get_system_shared_memory_status(name)
            entries = []
            for key, value in resp.regions.items():
                assert key == value.name
                entries.append(
                    {
                        "name": value.name,
                        "key": value.key,
                        "offset": value.offset,
                        "byte_size": value.byte_size,
                    }
                )
        return sorted(entries, key=lambda e: e["name"])

    def assert_no_data(self, result, name, shape):
        """The response names the output but carries none of its data."""
        if self.http:
            # No data and no binary_data_size: the bytes are in the region. (tritonclient's
            # as_numpy has nothing to read for such an output, with Triton as with Nereid.)
            assert result.get_output(name) == {"name": name, "datatype": "FP32", "shape": shape}
        else:
            resp = result.get_response()
            names = [o.name for o in resp.outputs]
            out = resp.outputs[names.index(name)]
            assert (out.datatype, list(out.shape)) == ("FP32", shape)
            assert not out.HasField("contents")
            # Triton adds an (empty) raw_output_contents entry for every
            # output, shared-memory ones included; the Python client finds an
            # inline output's bytes by its position among the outputs.
            assert len(resp.raw_output_contents) == len(resp.outputs)
            assert resp.raw_output_contents[names.index(name)] == b""


@pytest.fixture(params=["http", "grpc"])
def api(request, http_client, grpc_client):
    return Proto(request.param, http_client if request.param == "http" else grpc_client)


@pytest.fixture(params=["http-binary", "http-json", "grpc"])
def proto(request, http_client, grpc_client):
    return Proto(request.param, grpc_client if request.param == "grpc" else http_client)


def expect_no_region(p, name):
    expect_error(
        p,
        NOT_FOUND,
        f"Unable to find system shared memory region: '{name}'",
        p.client.get_system_shared_memory_status,
        name,
    )


def expect_error(p, codes, message, fn, *args, **kwargs):
    try:
        result = fn(*args, **kwargs)
    except InferenceServerException as e:
        assert (e.status(), e.message()) == (p.code(codes), message)
        return
    pytest.fail(f"expected an InferenceServerException, got {result!r}")


# --- extension and region management -----------------------------------------


def test_extension_listed(http_client, grpc_client):
    assert "system_shared_memory" in http_client.get_server_metadata()["extensions"]
    assert "system_shared_memory" in list(grpc_client.get_server_metadata().extensions)


def test_register_status_unregister(api, regions):
    r1 = regions("a", 64)
    r2 = regions("b", 64)
    api.register(r1)
    api.register(r2, offset=16, byte_size=32)
    e1 = {"name": r1.name, "key": r1.key, "offset": 0, "byte_size": 64}
    e2 = {"name": r2.name, "key": r2.key, "offset": 16, "byte_size": 32}

    ours = [e for e in api.status() if e["name"] in (r1.name, r2.name)]
    assert ours == [e1, e2]
    assert api.status(r1.name) == [e1]
    assert api.status(r2.name) == [e2]

    api.client.unregister_system_shared_memory(r1.name)
    expect_no_region(api, r1.name)
    assert api.status(r2.name) == [e2]

    # Unregistering a name that is not registered succeeds (Triton 2.51).
    api.client.unregister_system_shared_memory(r1.name)
    api.client.unregister_system_shared_memory("nereid_never_registered")

    # The name is free again.
    api.register(r1)
    assert api.status(r1.name) == [e1]

    api.client.unregister_system_shared_memory()
    assert api.status() == []
    expect_no_region(api, r2.name)


def test_status_of_unknown_region(api, regions):
    expect_no_region(api, "nereid_no_such_region")


def test_register_twice(api, regions):
    r = regions("r", 64)
    other = regions("other", 32)
    api.register(r)
    # Same name, another object: ALREADY_EXISTS (HTTP 400), measured on 2.51.
    message = f"shared memory region '{r.name}' already in manager"
    expect_error(api, ALREADY_EXISTS, message, api.register, other, name=r.name)
    assert api.status(r.name) == [{"name": r.name, "key": r.key, "offset": 0, "byte_size": 64}]
    api.assert_serving()


def test_register_missing_key(api, regions):
    key = f"/nereid_missing_{uuid.uuid4().hex[:8]}"
    # Triton 2.51 answers 500 (INTERNAL); a missing object is the client's
    # mistake, so Nereid answers 400 (deliberate difference).
    expect_error(
        api,
        INVALID_ARG,
        f"Unable to open shared memory region: '{key}'",
        api.client.register_system_shared_memory,
        "nereid_missing_key_region",
        key,
        16,
    )
    expect_no_region(api, "nereid_missing_key_region")


@pytest.mark.parametrize(
    "key", ["/../etc/passwd", "a/b", "", "///"], ids=["dotdot", "slash", "empty", "slashes"]
)
def test_register_invalid_key(api, regions, key):
    # Triton refuses only an all-slash key (in these words) and the reserved prefix;
    # Nereid also refuses anything that is not a plain POSIX shm name before touching
    # the system (deliberate difference), in the same words plus the reason.
    name = f"nereid_invalid_key_{api.kind}"
    try:
        api.client.register_system_shared_memory(name, key, 16)
    except InferenceServerException as e:
        assert e.status() == api.code(INVALID_ARG), e
        prefix = f"cannot register shared memory region '{name}' - invalid shm key '{key}'"
        assert e.message().startswith(prefix), e.message()
    else:
        pytest.fail(f"key {key!r} was accepted")
    expect_no_region(api, name)
    api.assert_serving()


@pytest.mark.parametrize("key", ["triton_python_backend_shm_region_x", "//triton_python_backend_shm_region_x"])
def test_register_reserved_key_prefix(api, regions, key):
    # The python backend's own regions use this prefix; Triton refuses it to clients.
    name = f"nereid_reserved_{api.kind}"
    try:
        api.client.register_system_shared_memory(name, key, 16)
    except InferenceServerException as e:
        assert e.status() == api.code(INVALID_ARG), e
        assert e.message() == (
            f"cannot register shared memory region '{name}' with key '{key}' as the key "
            "contains the reserved prefix 'triton_python_backend_shm_region_'"
        )
    else:
        pytest.fail(f"key {key!r} was accepted")
    expect_no_region(api, name)
    api.assert_serving()


@pytest.mark.parametrize("offset,byte_size", [(0, 65), (32, 40), (64, 1)])
def test_register_beyond_object(api, regions, offset, byte_size):
    r = regions("r", 64)
    try:
        api.register(r, offset=offset, byte_size=byte_size)
    except InferenceServerException as e:
        assert e.status() == api.code(INVALID_ARG), e
        # Triton's words, then which bounds.
        assert e.message().startswith(
            f"failed to register shared memory region '{r.name}': invalid args ("
        ), e.message()
    else:
        pytest.fail(f"offset {offset} + byte_size {byte_size} over a 64-byte object was accepted")
    expect_no_region(api, r.name)
    # The whole object is fine.
    api.register(r)
    assert api.status(r.name) == [{"name": r.name, "key": r.key, "offset": 0, "byte_size": 64}]


def test_register_unaligned_offset(proto, regions):
    # Triton 2.51 fails mmap for an offset that is not a multiple of the page
    # size; Nereid maps from the page boundary (deliberate difference). The
    # registered region is object bytes [16, 80); request offsets are relative
    # to it.
    r = regions("r", 128)
    r.write(16, A, B)
    proto.register(r, offset=16, byte_size=64)
    assert proto.status(r.name) == [{"name": r.name, "key": r.key, "offset": 16, "byte_size": 64}]
    result = proto.infer(
        [proto.from_shm("INPUT0", [1, 4], r.name, 16, 0), proto.from_shm("INPUT1", [1, 4], r.name, 16, 16)],
        [proto.output("OUTPUT0", r.name, 16, 32), proto.output("OUTPUT1", r.name, 16, 48)],
    )
    proto.assert_no_data(result, "OUTPUT0", [1, 4])
    proto.assert_no_data(result, "OUTPUT1", [1, 4])
    np.testing.assert_array_equal(r.read(48, [1, 4]), A + B)
    np.testing.assert_array_equal(r.read(64, [1, 4]), A - B)
    # Nothing was written outside the outputs' bytes.
    assert np.isnan(r.read(80, [12])).all()
    assert np.isnan(r.read(0, [4])).all()

    # Bounds are the registered region's (64 bytes), not the object's (128).
    expect_error(
        proto,
        INVALID_ARG,
        f"Invalid offset for shared memory region: '{r.name}'",
        proto.infer,
        [proto.from_shm("INPUT0", [1, 4], r.name, 16, 64), proto.from_shm("INPUT1", [1, 4], r.name, 16, 16)],
    )
    expect_error(
        proto,
        INVALID_ARG,
        f"Invalid offset + byte size for shared memory region: '{r.name}'",
        proto.infer,
        [proto.from_shm("INPUT0", [1, 4], r.name, 16, 56), proto.from_shm("INPUT1", [1, 4], r.name, 16, 16)],
    )
    proto.assert_serving()


# --- inference ---------------------------------------------------------------


def test_inputs_in_shm(proto, regions):
    r = regions("in", 32)
    r.write(0, A, B)
    proto.register(r)
    inputs = [proto.from_shm("INPUT0", [1, 4], r.name, 16), proto.from_shm("INPUT1", [1, 4], r.name, 16, 16)]
    outputs = [proto.output("OUTPUT0"), proto.output("OUTPUT1")]
    result = proto.infer(inputs, outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)

    # The server reads the region at each request: new contents, new result.
    r.write(0, B, A)
    result = proto.infer(inputs, outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), B + A)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), B - A)


def test_outputs_in_shm(proto, regions):
    r = regions("out", 32)
    proto.register(r)
    result = proto.infer(
        [proto.inline("INPUT0", A), proto.inline("INPUT1", B)],
        [proto.output("OUTPUT0", r.name, 16), proto.output("OUTPUT1", r.name, 16, 16)],
    )
    assert [o["name"] if proto.http else o.name for o in _outputs(proto, result)] == ["OUTPUT0", "OUTPUT1"]
    proto.assert_no_data(result, "OUTPUT0", [1, 4])
    proto.assert_no_data(result, "OUTPUT1", [1, 4])
    np.testing.assert_array_equal(r.read(0, [1, 4]), A + B)
    np.testing.assert_array_equal(r.read(16, [1, 4]), A - B)


def _outputs(proto, result):
    return result.get_response()["outputs"] if proto.http else list(result.get_response().outputs)


def test_inputs_and_outputs_in_one_region_batch_2(proto, regions):
    # Four [2,4] FP32 tensors (32 bytes each) side by side in one object.
    r = regions("all", 128)
    r.write(0, A2, B2)
    proto.register(r)
    result = proto.infer(
        [proto.from_shm("INPUT0", [2, 4], r.name, 32, 0), proto.from_shm("INPUT1", [2, 4], r.name, 32, 32)],
        [proto.output("OUTPUT0", r.name, 32, 64), proto.output("OUTPUT1", r.name, 32, 96)],
    )
    proto.assert_no_data(result, "OUTPUT0", [2, 4])
    proto.assert_no_data(result, "OUTPUT1", [2, 4])
    np.testing.assert_array_equal(r.read(64, [2, 4]), A2 + B2)
    np.testing.assert_array_equal(r.read(96, [2, 4]), A2 - B2)
    # The inputs are untouched.
    np.testing.assert_array_equal(r.read(0, [2, 4]), A2)
    np.testing.assert_array_equal(r.read(32, [2, 4]), B2)


def test_mixed_shm_and_inline(proto, regions):
    # INPUT0 and OUTPUT0 through shared memory, INPUT1 and OUTPUT1 inline. Over
    # gRPC the only raw_input_contents entry is INPUT1's (the client sends none
    # for shm inputs).
    r = regions("mixed", 48)
    r.write(32, A)
    proto.register(r)
    result = proto.infer(
        [proto.from_shm("INPUT0", [1, 4], r.name, 16, 32), proto.inline("INPUT1", B)],
        [proto.output("OUTPUT0", r.name, 16, 0), proto.output("OUTPUT1")],
    )
    proto.assert_no_data(result, "OUTPUT0", [1, 4])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
    np.testing.assert_array_equal(r.read(0, [1, 4]), A + B)
    assert np.isnan(r.read(16, [4])).all()


def test_two_regions(proto, regions):
    ins = regions("ins", 32)
    outs = regions("outs", 32)
    ins.write(0, A2)
    proto.register(ins)
    proto.register(outs)
    # INPUT1 is the same bytes as INPUT0: one region may back several inputs.
    result = proto.infer(
        [proto.from_shm("INPUT0", [2, 4], ins.name, 32), proto.from_shm("INPUT1", [2, 4], ins.name, 32)],
        [proto.output("OUTPUT0", outs.name, 32)],
    )
    proto.assert_no_data(result, "OUTPUT0", [2, 4])
    assert [o["name"] if proto.http else o.name for o in _outputs(proto, result)] == ["OUTPUT0"]
    np.testing.assert_array_equal(outs.read(0, [2, 4]), A2 + A2)


# --- inference errors (client side) -------------------------------------------


def test_infer_unknown_region(api, regions):
    r = regions("r", 32)
    r.write(0, A, B)
    api.register(r)
    msg = "Unable to find shared memory region: 'nereid_no_such_region'"
    expect_error(
        api,
        NOT_FOUND,
        msg,
        api.infer,
        [api.from_shm("INPUT0", [1, 4], "nereid_no_such_region", 16), api.from_shm("INPUT1", [1, 4], r.name, 16, 16)],
    )
    api.assert_serving()
    expect_error(
        api,
        NOT_FOUND,
        msg,
        api.infer,
        [api.inline("INPUT0", A), api.inline("INPUT1", B)],
        [api.output("OUTPUT0", "nereid_no_such_region", 16)],
    )
    api.assert_serving()


def test_infer_offset_out_of_region(api, regions):
    r = regions("r", 32)
    r.write(0, A, B)
    api.register(r)
    good = api.from_shm("INPUT1", [1, 4], r.name, 16, 16)
    expect_error(
        api,
        INVALID_ARG,
        f"Invalid offset for shared memory region: '{r.name}'",
        api.infer,
        [api.from_shm("INPUT0", [1, 4], r.name, 16, 32), good],
    )
    api.assert_serving()
    expect_error(
        api,
        INVALID_ARG,
        f"Invalid offset + byte size for shared memory region: '{r.name}'",
        api.infer,
        [api.from_shm("INPUT0", [1, 4], r.name, 16, 24), good],
    )
    api.assert_serving()
    expect_error(
        api,
        INVALID_ARG,
        f"Invalid offset + byte size for shared memory region: '{r.name}'",
        api.infer,
        [api.from_shm("INPUT0", [1, 4], r.name, 48), good],
    )
    api.assert_serving()


def test_infer_output_range_out_of_region(api, regions):
    r = regions("r", 32)
    api.register(r)
    inputs = [api.inline("INPUT0", A), api.inline("INPUT1", B)]
    expect_error(
        api,
        INVALID_ARG,
        f"Invalid offset for shared memory region: '{r.name}'",
        api.infer,
        inputs,
        [api.output("OUTPUT0", r.name, 16, 32)],
    )
    # Triton checks only the offset of an output region and would write 8
    # bytes past the region here; Nereid checks the range as for inputs
    # (deliberate difference).
    expect_error(
        api,
        INVALID_ARG,
        f"Invalid offset + byte size for shared memory region: '{r.name}'",
        api.infer,
        inputs,
        [api.output("OUTPUT0", r.name, 16, 24)],
    )
    assert np.isnan(r.read(0, [8])).all()
    api.assert_serving()


def test_infer_input_byte_size_mismatch(api, regions):
    r = regions("r", 32)
    r.write(0, A, B)
    api.register(r)
    expect_error(
        api,
        INVALID_ARG,
        BYTE_SIZE_MISMATCH,
        api.infer,
        [api.from_shm("INPUT0", [1, 4], r.name, 12), api.from_shm("INPUT1", [1, 4], r.name, 16, 16)],
    )
    api.assert_serving()


def test_infer_output_region_too_small(api, regions):
    r = regions("r", 32)
    api.register(r)
    # Triton reports this from its response allocator as INTERNAL; Nereid
    # answers 400 (deliberate difference), same text.
    expect_error(
        api,
        INVALID_ARG,
        "shared memory size specified with the request for output 'OUTPUT0' (8 bytes) should be at least 16 bytes "
        "to hold the results",
        api.infer,
        [api.inline("INPUT0", A), api.inline("INPUT1", B)],
        [api.output("OUTPUT0", r.name, 8), api.output("OUTPUT1")],
    )
    api.assert_serving()


# --- inference over raw HTTP ---------------------------------------------------

INFER = "/v2/models/add_sub/infer"


def assert_http_error(resp, status, message):
    assert resp.status == status, resp
    assert resp.json() == {"error": message}


def raw_body(in0_params, in1_params, outputs=None):
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "parameters": in0_params},
            {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32", "parameters": in1_params},
        ]
    }
    if outputs is not None:
        body["outputs"] = outputs
    return body


def assert_http_serving(server):
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": A.flatten().tolist()},
            {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32", "data": B.flatten().tolist()},
        ]
    }
    resp = server.request("POST", INFER, body)
    assert resp.status == 200, resp
    assert [o["data"] for o in resp.json()["outputs"]] == [(A + B).flatten().tolist(), (A - B).flatten().tolist()]


def test_http_raw_json(server, http_client, regions):
    r = regions("r", 48)
    r.write(0, A, B)
    http_client.register_system_shared_memory(r.name, r.key, 48)
    body = raw_body(
        {"shared_memory_region": r.name, "shared_memory_byte_size": 16},
        {"shared_memory_region": r.name, "shared_memory_byte_size": 16, "shared_memory_offset": 16},
        outputs=[
            # 'binary_data': false next to a region is what tritonclient
            # sends, and Triton accepts it (only true is refused).
            {
                "name": "OUTPUT0",
                "parameters": {
                    "shared_memory_region": r.name,
                    "shared_memory_byte_size": 16,
                    "shared_memory_offset": 32,
                    "binary_data": False,
                },
            },
            {"name": "OUTPUT1"},
        ],
    )
    resp = server.request("POST", INFER, body)
    assert resp.status == 200, resp
    assert resp.json()["outputs"] == [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 4]},
        {"name": "OUTPUT1", "datatype": "FP32", "shape": [1, 4], "data": (A - B).flatten().tolist()},
    ]
    np.testing.assert_array_equal(r.read(32, [1, 4]), A + B)


def test_http_raw_register_status_unregister(server, regions):
    r = regions("r", 32)
    base = f"/v2/systemsharedmemory/region/{r.name}"
    # 'offset' is optional (default 0).
    resp = server.request("POST", base + "/register", {"key": r.key, "byte_size": 32})
    assert (resp.status, resp.body) == (200, b""), resp
    resp = server.request("GET", base + "/status")
    assert resp.status == 200, resp
    assert resp.json() == [{"name": r.name, "key": r.key, "offset": 0, "byte_size": 32}]
    resp = server.request("GET", "/v2/systemsharedmemory/status")
    assert resp.status == 200, resp
    assert {"name": r.name, "key": r.key, "offset": 0, "byte_size": 32} in resp.json()
    resp = server.request("POST", base + "/unregister")
    assert resp.status == 200, resp
    assert_http_error(
        server.request("GET", base + "/status"), 404, f"Unable to find system shared memory region: '{r.name}'"
    )
    resp = server.request("POST", "/v2/systemsharedmemory/unregister")
    assert resp.status == 200, resp
    resp = server.request("GET", "/v2/systemsharedmemory/status")
    assert (resp.status, resp.json()) == (200, []), resp


def test_http_raw_register_errors(server, regions):
    r = regions("r", 32)
    base = f"/v2/systemsharedmemory/region/{r.name}"
    assert_http_error(
        server.request("POST", base + "/register", {"byte_size": 32}),
        400,
        "Shared memory register request has no 'key' field",
    )
    assert_http_error(
        server.request("POST", base + "/register", {"key": r.key}),
        400,
        "Shared memory register request has no 'byte_size' field",
    )
    assert_http_error(
        server.request("POST", "/v2/systemsharedmemory/register", {"key": r.key, "byte_size": 32}),
        400,
        "'region name' is necessary to register system shared memory region",
    )
    assert_http_error(
        server.request("GET", base + "/status"), 404, f"Unable to find system shared memory region: '{r.name}'"
    )
    assert_http_serving(server)


def incomplete_parameter_cases(region):
    """(INPUT0 parameters, the error) for incomplete shared-memory parameters. Triton's
    HTTP front end answers "Invalid offset + byte size ..." for the first and treats the
    others as "no data"; Nereid gives gRPC's explicit text on both (deliberate
    difference)."""
    return [
        ({"shared_memory_region": region}, BYTE_SIZE_REQUIRED),
        ({"shared_memory_byte_size": 16}, REGION_REQUIRED),
        ({"shared_memory_offset": 0}, REGION_REQUIRED),
    ]


def test_http_raw_infer_parameter_errors(server, http_client, regions):
    r = regions("r", 32)
    r.write(0, A, B)
    http_client.register_system_shared_memory(r.name, r.key, 32)
    good = {"shared_memory_region": r.name, "shared_memory_byte_size": 16, "shared_memory_offset": 16}
    for params, message in incomplete_parameter_cases(r.name):
        assert_http_error(server.request("POST", INFER, raw_body(params, good)), 400, message)
        assert_http_serving(server)

    # Data and a region for one input.
    body = raw_body({"shared_memory_region": r.name, "shared_memory_byte_size": 16}, good)
    body["inputs"][0]["data"] = A.flatten().tolist()
    assert_http_error(
        server.request("POST", INFER, body),
        400,
        "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
        "'shared_memory_region' in 'parameters'. But set 'data' 'shared_memory_region'",
    )
    body = raw_body({"shared_memory_region": r.name, "shared_memory_byte_size": 16, "binary_data_size": 16}, good)
    assert_http_error(
        server.request("POST", INFER, body),
        400,
        "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
        "'shared_memory_region' in 'parameters'. But set 'binary_data_size' 'shared_memory_region'",
    )

    # An output in shared memory cannot also be binary.
    outputs = [
        {
            "name": "OUTPUT0",
            "parameters": {"shared_memory_region": r.name, "shared_memory_byte_size": 16, "binary_data": True},
        }
    ]
    first = {"shared_memory_region": r.name, "shared_memory_byte_size": 16}
    assert_http_error(
        server.request("POST", INFER, raw_body(first, good, outputs)),
        400,
        "Output can't set both 'shared_memory_region' and 'binary_data'",
    )
    assert_http_serving(server)
    # Nothing was written into the region by the refused requests.
    np.testing.assert_array_equal(r.read(0, [1, 4]), A)
    np.testing.assert_array_equal(r.read(16, [1, 4]), B)


# --- inference over the raw gRPC stub -------------------------------------------


def grpc_shm_request(in0_params, in1_params):
    req = service_pb2.ModelInferRequest(model_name="add_sub")
    for name, params in (("INPUT0", in0_params), ("INPUT1", in1_params)):
        tensor = req.inputs.add(name=name, datatype="FP32", shape=[1, 4])
        for key, value in params.items():
            if isinstance(value, str):
                tensor.parameters[key].string_param = value
            else:
                tensor.parameters[key].int64_param = value
    return req


def test_grpc_raw_infer_parameter_errors(server, http_client, regions):
    r = regions("r", 32)
    r.write(0, A, B)
    http_client.register_system_shared_memory(r.name, r.key, 32)
    good0 = {"shared_memory_region": r.name, "shared_memory_byte_size": 16}
    good1 = {"shared_memory_region": r.name, "shared_memory_byte_size": 16, "shared_memory_offset": 16}
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for params, message in incomplete_parameter_cases(r.name):
            with pytest.raises(grpc.RpcError) as info:
                stub.ModelInfer(grpc_shm_request(params, good1), timeout=20)
            assert (info.value.code(), info.value.details()) == (grpc.StatusCode.INVALID_ARGUMENT, message)
            # The well-formed request through the raw stub works.
            good = stub.ModelInfer(grpc_shm_request(good0, good1), timeout=20)
            assert [o.name for o in good.outputs] == ["OUTPUT0", "OUTPUT1"]
            assert good.raw_output_contents[0] == (A + B).tobytes()
            assert good.raw_output_contents[1] == (A - B).tobytes()


# --- concurrency and statistics ----------------------------------------------------


def test_unregister_while_in_use(server, grpc_client, regions):
    """A worker runs 50 shared-memory inferences while this thread unregisters
    and re-registers their region: each one either succeeds with the right
    data or fails with the unknown-region error, and the server lives on."""
    r = regions("r", 64)
    r.write(0, A, B)
    grpc_client.register_system_shared_memory(r.name, r.key, 64)
    outcomes = []
    done = threading.Event()

    def worker():
        client = server.http_client()
        try:
            inputs = [
                httpclient.InferInput("INPUT0", [1, 4], "FP32").set_shared_memory(r.name, 16),
                httpclient.InferInput("INPUT1", [1, 4], "FP32").set_shared_memory(r.name, 16, 16),
            ]
            outputs = [httpclient.InferRequestedOutput("OUTPUT0"), httpclient.InferRequestedOutput("OUTPUT1")]
            outputs[0].set_shared_memory(r.name, 16, 32)
            outputs[1].set_shared_memory(r.name, 16, 48)
            for _ in range(50):
                r.write(32, np.full(8, np.nan, F32))
                try:
                    client.infer("add_sub", inputs, outputs=outputs)
                except InferenceServerException as e:
                    outcomes.append(("error", e.status(), e.message()))
                else:
                    outcomes.append(("ok", r.read(32, [1, 4]), r.read(48, [1, 4])))
        except Exception as e:  # anything else is a failure of the test
            outcomes.append(("crash", repr(e)))
        finally:
            client.close()
            done.set()

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    toggles = 0
    while not done.is_set():
        grpc_client.unregister_system_shared_memory(r.name)
        grpc_client.register_system_shared_memory(r.name, r.key, 64)
        toggles += 1
        time.sleep(0.003)
    thread.join(30)
    assert not thread.is_alive()

    assert len(outcomes) == 50, outcomes[-3:]
    assert toggles > 0
    ok = 0
    for outcome in outcomes:
        if outcome[0] == "ok":
            np.testing.assert_array_equal(outcome[1], A + B)
            np.testing.assert_array_equal(outcome[2], A - B)
            ok += 1
        else:
            assert outcome == ("error", "404", f"Unable to find shared memory region: '{r.name}'"), outcome
    # The region is registered most of the time.
    assert ok > 0

    # Still serving, with and without shared memory.
    assert server.proc.poll() is None
    assert grpc_client.get_system_shared_memory_status(r.name).regions[r.name].byte_size == 64
    r.write(32, np.full(8, np.nan, F32))
    grpc_proto = Proto("grpc", grpc_client)
    result = grpc_proto.infer(
        [grpc_proto.from_shm("INPUT0", [1, 4], r.name, 16), grpc_proto.from_shm("INPUT1", [1, 4], r.name, 16, 16)],
        [grpc_proto.output("OUTPUT0", r.name, 16, 32), grpc_proto.output("OUTPUT1", r.name, 16, 48)],
    )
    grpc_proto.assert_no_data(result, "OUTPUT0", [1, 4])
    np.testing.assert_array_equal(r.read(32, [1, 4]), A + B)
    np.testing.assert_array_equal(r.read(48, [1, 4]), A - B)
    grpc_proto.assert_serving()


def test_statistics_count_shm_requests(make_repo, start_server, regions):
    # A server of its own, so that the counts are this test's traffic only.
    srv = start_server(make_repo(["add_sub"]), "--allow-client-shm=true")
    http = srv.http_client()
    grpc_ = srv.grpc_client()
    try:
        r = regions("r", 128)
        r.write(0, A2, B2)
        http.register_system_shared_memory(r.name, r.key, 128)
        for p in (Proto("http-binary", http), Proto("grpc", grpc_)):
            r.write(64, np.full(16, np.nan, F32))
            p.infer(
                [p.from_shm("INPUT0", [2, 4], r.name, 32), p.from_shm("INPUT1", [2, 4], r.name, 32, 32)],
                [p.output("OUTPUT0", r.name, 32, 64), p.output("OUTPUT1", r.name, 32, 96)],
            )
            np.testing.assert_array_equal(r.read(64, [2, 4]), A2 + B2)
            np.testing.assert_array_equal(r.read(96, [2, 4]), A2 - B2)
        s = http.get_inference_statistics("add_sub")["model_stats"][0]
        assert s["inference_count"] == 4  # two requests of batch 2
        assert s["execution_count"] == 2
        assert s["inference_stats"]["success"]["count"] == 2
        assert s["inference_stats"]["fail"]["count"] == 0
        http.unregister_system_shared_memory()
    finally:
        http.close()
        grpc_.close()
