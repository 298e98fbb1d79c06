"""Shared-memory tensors stay where the client put them, as Triton hands a backend the
regions themselves.

Inputs: a model of a hosted backend whose instances are all on GPUs gets a CUDA input's
GPU address (`TRITONBACKEND_InputBuffer` answers TRITONSERVER_MEMORY_GPU and the region's
device); every other model gets the bytes copied to the host when the request is
admitted. Outputs: `TRITONBACKEND_OutputBuffer` hands the backend the window of the
output's region (a CUDA one only when the backend prefers GPU memory), so the backend
writes where the client reads and the frontend copies nothing; a model with a response
cache gets host memory (the cache keeps the bytes).

The CUDA driver test double (fake_cuda/fake_cuda.c) stands in for the GPUs: its device
memory is a POSIX shared-memory object, so the C test backend (mode "where") can read and
write it in place and answer with the memory types it was given.
"""

import base64
import os
import threading
import time
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from conftest import Server, base_args
from test_cuda_shared_memory import Device
from test_hosted_backend import build, model

CPU, GPU = 0, 2
IO = """
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "PLACE" data_type: TYPE_INT64 dims: [ 4 ] } ]"""
DATA = np.array([1.5, -2.0, 3.25, 8.0], np.float32)


@pytest.fixture(scope="module")
def gpu_server(tmp_path_factory, fake_cuda):
    backends = tmp_path_factory.mktemp("backends")
    build(backends, "nereid_test")
    root = tmp_path_factory.mktemp("models")
    model(root, "on_gpu", "where", io=IO, extra="instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]")
    model(root, "on_cpu", "where", io=IO, extra="instance_group [ { kind: KIND_CPU } ]")
    model(root, "querying", "query", io="""
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_INT64 dims: [ 3 ] } ]""",
          extra="instance_group [ { kind: KIND_CPU } ]")
    model(root, "late", "late", extra="instance_group [ { kind: KIND_CPU } ]")
    model(root, "cached", "where", io=IO,
          extra="instance_group [ { kind: KIND_GPU } ]\nresponse_cache { enable: true }")
    server = Server(str(root), base_args(str(root), [
        "--backend-directory", str(backends), "--allow-client-shm=true",
        "--cache-config=local,size=1048576"]),
        env={"NEREID_CUDA_LIBRARY": fake_cuda, "FAKE_CUDA_DEVICES": "2"})
    server.wait_started(timeout=60)
    yield server
    server.kill()


@pytest.fixture
def region(gpu_server):
    device = Device(64)
    device.write(16, DATA)
    # One registry behind both protocols: registered once, on GPU 1.
    gpu_server.http_client().register_cuda_shared_memory(
        "in", base64.b64encode(device.raw_handle()), 1, 64)
    yield device
    gpu_server.http_client().unregister_cuda_shared_memory()
    shm.destroy_shared_memory_region(device.handle)


def infer(server, protocol, model_name, from_region=True, out_region=None, data=None):
    """OUT and where the backend was given IN's and OUT's buffers: IN from region "in"
    unless `data` is given or not `from_region`, OUT into `out_region` (name, size,
    offset) when given."""
    module = httpclient if protocol == "http" else grpcclient
    client = server.http_client() if protocol == "http" else server.grpc_client()
    tensor = module.InferInput("IN", [4], "FP32")
    if from_region and data is None:
        tensor.set_shared_memory("in", 16, offset=16)
    else:
        tensor.set_data_from_numpy(DATA if data is None else data)
    outputs = [module.InferRequestedOutput("PLACE")]
    if out_region is not None:
        out = module.InferRequestedOutput("OUT")
        out.set_shared_memory(*out_region)
        outputs.append(out)
    else:
        outputs.append(module.InferRequestedOutput("OUT"))
    result = client.infer(model_name, [tensor], outputs=outputs)
    place = result.as_numpy("PLACE").tolist()
    out = result.as_numpy("OUT") if out_region is None else None
    return out, place[:2], place[2:]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_gpu_model_reads_a_cuda_input_on_its_gpu(gpu_server, region, protocol):
    out, place, out_place = infer(gpu_server, protocol, "on_gpu")
    assert place == [GPU, 1]
    assert out_place == [CPU, 0], "an output not in a region goes to host memory"
    np.testing.assert_array_equal(out, DATA)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_other_models_and_inputs_get_host_memory(gpu_server, region, protocol):
    # A CPU instance, and a model whose response cache needs the bytes: copied to the host.
    for name in ("on_cpu", "cached"):
        out, place, _ = infer(gpu_server, protocol, name)
        assert place == [CPU, 0], name
        np.testing.assert_array_equal(out, DATA)
    # An input in the request itself stays in host memory for a GPU model too.
    out, place, _ = infer(gpu_server, protocol, "on_gpu", from_region=False)
    assert place == [CPU, 0]
    np.testing.assert_array_equal(out, DATA)


@pytest.fixture
def out_regions(gpu_server):
    """An output region on GPU 0 ("gpu_out") and a system one ("host_out")."""
    device = Device(32)
    client = gpu_server.http_client()
    client.register_cuda_shared_memory("gpu_out", base64.b64encode(device.raw_handle()), 0, 32)
    key = f"/nereid_out_{uuid.uuid4().hex[:8]}"
    host = shm.create_shared_memory_region("host_out", key, 32)
    client.register_system_shared_memory("host_out", key, 32)
    yield device, host
    client.unregister_cuda_shared_memory("gpu_out")
    client.unregister_system_shared_memory("host_out")
    shm.destroy_shared_memory_region(device.handle)
    shm.destroy_shared_memory_region(host)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_backend_writes_its_output_into_the_clients_region(
        gpu_server, region, out_regions, protocol):
    device, host = out_regions
    # A backend that prefers GPU memory is given the CUDA window itself, on its GPU, on a
    # GPU or a CPU instance alike (as Triton's frontends lend it), and writes there.
    for name in ("on_gpu", "on_cpu"):
        device.write(8, np.zeros(4, np.float32))
        _, _, out_place = infer(gpu_server, protocol, name, from_region=False,
                                out_region=("gpu_out", 16, 8))
        assert out_place == [GPU, 0], name
        np.testing.assert_array_equal(device.read(8, [4]), DATA)
    # A system region is host memory: lent to the backend as such.
    _, _, out_place = infer(gpu_server, protocol, "on_gpu", from_region=False,
                            out_region=("host_out", 16, 4))
    assert out_place == [CPU, 0]
    np.testing.assert_array_equal(
        shm.get_contents_as_numpy(host, np.float32, [4], offset=4), DATA)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_cached_model_or_a_window_too_small_gets_host_memory(
        gpu_server, region, out_regions, protocol):
    device, host = out_regions
    # The response cache keeps the outputs, so the backend writes host memory and the
    # frontend copies the output into the region. Inputs of this test only: a miss first.
    data = DATA * (2 if protocol == "http" else 5)
    zeros = np.zeros(4, np.float32)
    shm.set_shared_memory_region(host, [zeros], offset=16)
    infer(gpu_server, protocol, "cached", data=data, out_region=("host_out", 16, 16))
    host_bytes = shm.get_contents_as_numpy(host, np.float32, [4], offset=16)
    np.testing.assert_array_equal(host_bytes, data)
    # The client reuses its region; what the cache answers is still the model's output.
    shm.set_shared_memory_region(host, [zeros], offset=16)
    out, _, _ = infer(gpu_server, protocol, "cached", data=data)
    np.testing.assert_array_equal(out, data)
    # A hit into a CUDA region.
    device.write(0, zeros)
    infer(gpu_server, protocol, "cached", data=data, out_region=("gpu_out", 16, 0))
    np.testing.assert_array_equal(device.read(0, [4]), data)
    # A window smaller than the output is not lent; the answer is Triton's size error.
    with pytest.raises(InferenceServerException, match="should be at least 16 bytes"):
        infer(gpu_server, protocol, "on_gpu", from_region=False, out_region=("gpu_out", 12, 0))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_backend_asking_where_an_output_goes_is_told_its_region(
        gpu_server, region, out_regions, protocol):
    """TRITONBACKEND_RequestOutputBufferProperties for an output in a CUDA region: that
    region's GPU (the backend asked for 16 bytes of CPU_PINNED memory on device 1 and
    writes what it was told, into the region through host memory it prefers)."""
    device, _ = out_regions
    module = httpclient if protocol == "http" else grpcclient
    client = gpu_server.http_client() if protocol == "http" else gpu_server.grpc_client()
    tensor = module.InferInput("IN", [4], "FP32")
    tensor.set_data_from_numpy(DATA)
    out = module.InferRequestedOutput("OUT")
    out.set_shared_memory("gpu_out", 24)
    client.infer("querying", [tensor], outputs=[out])
    told = shm.get_contents_as_numpy(device.handle, np.int64, [3]).tolist()
    assert told == [GPU, 0, 16]


def test_a_region_truncated_under_the_backends_write_costs_that_request_alone(gpu_server):
    """The backend writes its output into the client's region itself: a client that shrinks
    the object meanwhile gets its request failed (the lost pages are replaced with zero
    pages as the backend writes, see nereid_shm::sigbus), and the server goes on."""
    key = f"/nereid_late_{uuid.uuid4().hex[:8]}"
    region = shm.create_shared_memory_region("late_out", key, 8192)
    gpu_server.http_client().register_system_shared_memory("late_out", key, 8192)
    failures = []

    def call():
        tensor = httpclient.InferInput("IN", [1024], "FP32")
        tensor.set_data_from_numpy(np.arange(1024, dtype=np.float32))
        out = httpclient.InferRequestedOutput("OUT")
        out.set_shared_memory("late_out", 4096, offset=4096)
        try:
            gpu_server.http_client().infer("late", [tensor], outputs=[out])
        except InferenceServerException as e:
            failures.append(str(e))

    try:
        caller = threading.Thread(target=call)
        caller.start()
        time.sleep(0.15)  # the request is admitted; the backend writes after 400 ms
        os.truncate(f"/dev/shm{key}", 4096)
        caller.join(10)
        assert len(failures) == 1, failures
        assert "'late_out' is no longer usable: its object was truncated while the server was using it" in failures[0]
        out, _, _ = infer(gpu_server, "http", "on_cpu", from_region=False)
        np.testing.assert_array_equal(out, DATA)
    finally:
        gpu_server.http_client().unregister_system_shared_memory("late_out")
        shm.destroy_shared_memory_region(region)
