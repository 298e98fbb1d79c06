"""CUDA shared-memory inputs reach a GPU backend where they are, as Triton hands a GPU
backend the region's device memory: a model of a hosted backend whose instances are all
on GPUs gets the input's GPU address (`TRITONBACKEND_InputBuffer` answers
TRITONSERVER_MEMORY_GPU and the region's device); every other model gets the bytes
copied to the host when the request is admitted, as before. The CUDA driver test double
(fake_cuda/fake_cuda.c) stands in for the GPUs: its device memory is a POSIX
shared-memory object, so the C test backend (mode "where") can read it in place and
answer with what it read and the memory type it was given.
"""

import base64

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from conftest import Server, base_args
from test_cuda_shared_memory import Device
from test_hosted_backend import build, model

CPU, GPU = 0, 2
IO = """
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "PLACE" data_type: TYPE_INT64 dims: [ 2 ] } ]"""
DATA = np.array([1.5, -2.0, 3.25, 8.0], np.float32)


@pytest.fixture(scope="module")
def gpu_server(tmp_path_factory, fake_cuda):
    backends = tmp_path_factory.mktemp("backends")
    build(backends, "nereid_test")
    root = tmp_path_factory.mktemp("models")
    model(root, "on_gpu", "where", io=IO, extra="instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]")
    model(root, "on_cpu", "where", io=IO, extra="instance_group [ { kind: KIND_CPU } ]")
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


def infer(server, protocol, model_name, from_region=True):
    module = httpclient if protocol == "http" else grpcclient
    client = server.http_client() if protocol == "http" else server.grpc_client()
    tensor = module.InferInput("IN", [4], "FP32")
    if from_region:
        tensor.set_shared_memory("in", 16, offset=16)
    else:
        tensor.set_data_from_numpy(DATA)
    result = client.infer(model_name, [tensor])
    return result.as_numpy("OUT"), result.as_numpy("PLACE").tolist()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_gpu_model_reads_a_cuda_input_on_its_gpu(gpu_server, region, protocol):
    out, place = infer(gpu_server, protocol, "on_gpu")
    assert place == [GPU, 1]
    np.testing.assert_array_equal(out, DATA)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_other_models_and_inputs_get_host_memory(gpu_server, region, protocol):
    # A CPU instance, and a model whose response cache needs the bytes: copied to the host.
    for name in ("on_cpu", "cached"):
        out, place = infer(gpu_server, protocol, name)
        assert place == [CPU, 0], name
        np.testing.assert_array_equal(out, DATA)
    # An input in the request itself stays in host memory for a GPU model too.
    out, place = infer(gpu_server, protocol, "on_gpu", from_region=False)
    assert place == [CPU, 0]
    np.testing.assert_array_equal(out, DATA)
