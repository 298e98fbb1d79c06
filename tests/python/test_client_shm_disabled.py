"""Client shared memory is off unless the server starts with --allow-client-shm=true.

Triton (after 2.51; `src/common.h` kClientShmDisabledErrorStr, checked first in the
register/unregister handlers of `http_server.cc` and `grpc/grpc_server.cc`, and
`qa/L0_shared_memory` test_client_shm_disabled_by_default) refuses register and
unregister of system and CUDA regions with UNSUPPORTED (HTTP 501, gRPC UNIMPLEMENTED)
while status queries still answer (empty). An inference that names a region then fails
as for any unregistered region. Triton 2.51 itself had no flag and always allowed it.
"""

import base64

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from conftest import EXAMPLE_MODELS, Server, base_args, expect_error

DISABLED = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
UNSUPPORTED = {"http": "501", "grpc": "StatusCode.UNIMPLEMENTED"}


@pytest.fixture(scope="module")
def srv():
    server = Server(EXAMPLE_MODELS, base_args(EXAMPLE_MODELS))
    try:
        yield server.wait_started()
    finally:
        server.kill()


@pytest.fixture
def region():
    key = "/nereid_disabled_shm"
    handle = shm.create_shared_memory_region("off", key, 64)
    shm.set_shared_memory_region(handle, [np.arange(8, dtype=np.float32), np.ones(8, np.float32)])
    yield key
    shm.destroy_shared_memory_region(handle)


def client_of(srv, proto):
    return srv.http_client() if proto == "http" else srv.grpc_client()


def status_count(client, proto, cuda=False):
    status = client.get_cuda_shared_memory_status() if cuda else client.get_system_shared_memory_status()
    return len(status) if proto == "http" else len(status.regions)


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_register_and_unregister_are_refused_and_status_answers(srv, region, proto):
    client = client_of(srv, proto)
    calls = [
        (client.register_system_shared_memory, ("off", region, 64)),
        (client.unregister_system_shared_memory, ("off",)),
        (client.unregister_system_shared_memory, ()),
        (client.register_cuda_shared_memory, ("c", base64.b64encode(b"\0" * 64), 0, 64)),
        (client.unregister_cuda_shared_memory, ("c",)),
        (client.unregister_cuda_shared_memory, ()),
    ]
    for call, args in calls:
        e = expect_error(call, *args)
        assert (e.status(), e.message()) == (UNSUPPORTED[proto], DISABLED), call
    assert status_count(client, proto) == 0
    assert status_count(client, proto, cuda=True) == 0


def test_http_refuses_before_reading_the_request(srv):
    # Triton checks the flag before the region name and the body.
    for path in ["/v2/systemsharedmemory/register", "/v2/cudasharedmemory/register",
                 "/v2/systemsharedmemory/region/r/register"]:
        r = srv.request("POST", path, body=b"not json")
        assert (r.status, r.json()) == (501, {"error": DISABLED}), path


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_an_inference_naming_a_region_finds_none(srv, proto):
    module = httpclient if proto == "http" else grpcclient
    inputs = [module.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_shared_memory("off", 16)
    inputs[1].set_data_from_numpy(np.ones((1, 4), np.float32))
    e = expect_error(client_of(srv, proto).infer, "add_sub", inputs)
    assert e.message() == "Unable to find shared memory region: 'off'", e.message()
