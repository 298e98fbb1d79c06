"""CUDA shared memory against a real GPU and driver: run by scripts/gpu_check.sh on the
device machine, against a nereid started with --allow-client-shm=true and the example
repository (model `simple`: INPUT0, INPUT1 INT32 [1, 16] -> OUTPUT0 = sum,
OUTPUT1 = difference). Not collected by the CPU suite (tests/python): without a GPU
there is nothing here to run.

Device memory is allocated with tritonclient.utils.cuda_shared_memory (cudaMalloc +
cudaIpcGetMemHandle, as users do) and read and written at offsets through
cuda.bindings directly, since tritonclient's helpers only work at offset 0.

Environment: NEREID_HTTP_URL, NEREID_GRPC_URL (default localhost:8000 / 8001).
"""

import base64
import os
import uuid

import cuda.bindings.runtime as cudart
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.cuda_shared_memory as cudashm
from tritonclient.utils import InferenceServerException

HTTP_URL = os.environ.get("NEREID_HTTP_URL", "localhost:8000")
GRPC_URL = os.environ.get("NEREID_GRPC_URL", "localhost:8001")
I32 = np.int32
TENSOR_BYTES = 16 * 4


def check(result):
    """cuda.bindings returns (status, values...): fail on a status, return the values."""
    status, *values = result
    assert status == cudart.cudaError_t.cudaSuccess, status
    return values[0] if len(values) == 1 else values


def write(region, offset, array):
    array = np.ascontiguousarray(array)
    check(
        cudart.cudaMemcpy(
            region._base_addr + offset,
            array.ctypes.data,
            array.nbytes,
            cudart.cudaMemcpyKind.cudaMemcpyHostToDevice,
        )
    )


def read(region, offset, count, dtype=I32):
    host = np.empty(count, dtype)
    check(
        cudart.cudaMemcpy(
            host.ctypes.data,
            region._base_addr + offset,
            host.nbytes,
            cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost,
        )
    )
    return host


def free(region):
    """Frees the allocation behind `region` now, as its owner would."""
    check(cudart.cudaFree(region._base_addr))
    region._base_addr = None


@pytest.fixture(params=["http", "grpc"])
def client(request):
    if request.param == "http":
        c = httpclient.InferenceServerClient(HTTP_URL, network_timeout=60)
        c.protocol = httpclient
    else:
        c = grpcclient.InferenceServerClient(GRPC_URL)
        c.protocol = grpcclient
    c.unregister_cuda_shared_memory()
    yield c
    c.unregister_cuda_shared_memory()
    c.close()


@pytest.fixture
def regions():
    made = []

    def create(byte_size, device=0):
        name = f"gpu_{uuid.uuid4().hex[:8]}"
        made.append(cudashm.create_shared_memory_region(name, byte_size, device))
        return made[-1]

    yield create
    for region in made:
        if region._base_addr is not None:
            cudashm.destroy_shared_memory_region(region)


def register(client, region, byte_size=None, device=0):
    client.register_cuda_shared_memory(
        region._triton_shm_name,
        cudashm.get_raw_handle(region),
        device,
        region._byte_size if byte_size is None else byte_size,
    )


def simple_request(client, source, out, in_offsets=(0, 256), out_offsets=(0, 128)):
    p = client.protocol
    inputs = [p.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor, offset in zip(inputs, in_offsets):
        tensor.set_shared_memory(source._triton_shm_name, TENSOR_BYTES, offset)
    outputs = [p.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
    for tensor, offset in zip(outputs, out_offsets):
        tensor.set_shared_memory(out._triton_shm_name, TENSOR_BYTES, offset)
    return client.infer("simple", inputs, outputs=outputs)


def test_inputs_and_outputs_at_offsets_in_device_memory(client, regions):
    a = np.arange(16, dtype=I32) * 3
    b = np.arange(16, dtype=I32) - 8
    source, out = regions(1024), regions(512)
    write(source, 0, a)
    write(source, 256, b)
    write(out, 0, np.full(64, -1, I32))
    register(client, source)
    register(client, out)
    result = simple_request(client, source, out)
    for name in ("OUTPUT0", "OUTPUT1"):
        assert result.get_output(name) is not None
    np.testing.assert_array_equal(read(out, 0, 16), a + b)
    np.testing.assert_array_equal(read(out, 128, 16), a - b)
    # Between and after the outputs the region is untouched.
    assert (read(out, 64, 16) == -1).all() and (read(out, 192, 16) == -1).all()


def test_status_reports_each_region_with_its_device_and_size(client, regions):
    region = regions(4096)
    register(client, region, byte_size=3000)
    status = client.get_cuda_shared_memory_status(region._triton_shm_name)
    if client.protocol is grpcclient:
        entry = status.regions[region._triton_shm_name]
        assert (entry.device_id, entry.byte_size) == (0, 3000)
    else:
        assert status == [{"name": region._triton_shm_name, "device_id": 0, "byte_size": 3000}]
    client.unregister_cuda_shared_memory(region._triton_shm_name)
    with pytest.raises(InferenceServerException, match="Unable to find"):
        client.get_cuda_shared_memory_status(region._triton_shm_name)


def test_byte_size_beyond_the_allocation_is_refused(client, regions):
    region = regions(1024)
    with pytest.raises(InferenceServerException, match="exceeds the CUDA allocation"):
        register(client, region, byte_size=1 << 20)
    register(client, region, byte_size=1024)


def test_a_device_the_server_does_not_have_is_refused(client, regions):
    count = check(cudart.cudaGetDeviceCount())
    region = regions(1024)
    with pytest.raises(InferenceServerException, match="does not exist"):
        register(client, region, device=count)


def test_a_handle_that_is_not_an_allocation_is_refused(client):
    with pytest.raises(InferenceServerException, match="CUDA IPC handle"):
        client.register_cuda_shared_memory("bogus", base64.b64encode(bytes(range(64))), 0, 64)
    assert client.is_server_ready()


def test_reads_and_writes_outside_the_region_fail_the_request(client, regions):
    source, out = regions(512), regions(512)
    write(source, 0, np.zeros(128, I32))
    register(client, source, byte_size=300)
    register(client, out, byte_size=100)
    with pytest.raises(InferenceServerException):
        simple_request(client, source, out, in_offsets=(0, 256))
    with pytest.raises(InferenceServerException):
        simple_request(client, source, out, in_offsets=(0, 64), out_offsets=(0, 64))
    assert client.is_server_ready()


def test_a_region_freed_by_its_owner_never_harms_the_server(client, regions):
    source, out = regions(1024), regions(512)
    write(source, 0, np.ones(256, I32))
    register(client, source)
    register(client, out)
    free(source)
    # CUDA keeps an allocation alive while another process has its IPC handle open, so
    # the request may succeed (with the last contents) or fail; either way the server
    # answers, keeps serving and unregisters the region.
    try:
        simple_request(client, source, out)
    except InferenceServerException as e:
        assert "CUDA" in str(e) or "shared memory" in str(e), e
    assert client.is_server_ready()
    client.unregister_cuda_shared_memory(source._triton_shm_name)
    fresh = regions(1024)
    write(fresh, 0, np.full(256, 2, I32))
    register(client, fresh)
    simple_request(client, fresh, out)
    np.testing.assert_array_equal(read(out, 0, 16), np.full(16, 4, I32))
