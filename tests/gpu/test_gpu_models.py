"""Models executing on a real GPU: run by scripts/gpu_check.sh on the device machine
against a nereid serving tests/gpu/make_gpu_models.py's repository through Triton's
pytorch backend (GPU build) and Triton's python backend (the nvidia-pytriton wheel's GPU
build), with --allow-client-shm=true. Not collected by the CPU suite (tests/python).

Environment: NEREID_HTTP_URL, NEREID_GRPC_URL, NEREID_METRICS_URL (default
localhost:8000 / 8001 / 8002),
NEREID_LOG (the server's log file, for the backends' placement lines).
"""

import os
import re
import subprocess
import urllib.request

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.cuda_shared_memory as cudashm

from make_gpu_models import DEPTH, DIM, matmul_weights

METRICS_URL = os.environ.get("NEREID_METRICS_URL", "localhost:8002")
HTTP_URL = os.environ.get("NEREID_HTTP_URL", "localhost:8000")
GRPC_URL = os.environ.get("NEREID_GRPC_URL", "localhost:8001")
GPU_MODELS = ["torch_addsub", "torch_matmul_gpu", "py_torch_gpu"]
CLIENTS = {"http": (httpclient, HTTP_URL), "grpc": (grpcclient, GRPC_URL)}


def client(protocol):
    module, url = CLIENTS[protocol]
    return module, module.InferenceServerClient(url)


def inputs(module, arrays):
    """InferInputs named INPUT__<i> for each array."""
    made = []
    for index, array in enumerate(arrays):
        tensor = module.InferInput(f"INPUT__{index}", list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        made.append(tensor)
    return made


@pytest.mark.parametrize("name", GPU_MODELS)
def test_gpu_groups_are_placed_on_gpu_0(name):
    config = httpclient.InferenceServerClient(HTTP_URL).get_model_config(name)
    group = config["instance_group"][0]
    assert (group["kind"], group["gpus"]) == ("KIND_GPU", [0]), group


def test_the_backends_initialize_their_instances_on_the_gpu():
    log = open(os.environ["NEREID_LOG"]).read()
    for name in ("torch_addsub", "torch_matmul_gpu"):
        assert re.search(rf"ModelInstanceInitialize: {name}_0_0 \((KIND_)?GPU device 0\)", log), name
    assert re.search(r"ModelInstanceInitialize: torch_matmul_cpu_0_0 \((KIND_)?CPU device 0\)", log)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_torchscript_runs_on_the_gpu(protocol):
    module, server = client(protocol)
    a = np.arange(16, dtype=np.float32)
    b = np.full(16, 0.5, dtype=np.float32)
    result = server.infer("torch_addsub", inputs(module, [a, b]))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__1"), a - b)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_gpu_and_cpu_instances_of_one_model_agree(protocol):
    module, server = client(protocol)
    x = np.random.default_rng(1).standard_normal((4, DIM), dtype=np.float32)
    expected = torch.from_numpy(x)
    weights = matmul_weights()
    for _ in range(DEPTH):
        expected = torch.tanh(expected @ weights)
    for name in ("torch_matmul_gpu", "torch_matmul_cpu"):
        got = server.infer(name, inputs(module, [x])).as_numpy("OUTPUT__0")
        np.testing.assert_allclose(got, expected.numpy(), atol=2e-3, err_msg=name)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_python_model_answers_with_gpu_tensors_through_dlpack(protocol):
    module, server = client(protocol)
    x = np.linspace(-1, 1, 10, dtype=np.float32)
    tensor = module.InferInput("INPUT0", [10], "FP32")
    tensor.set_data_from_numpy(x)
    result = server.infer("py_torch_gpu", [tensor])
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), 2 * x + 1, rtol=1e-6)
    assert result.as_numpy("DEVICE").tolist() == [1, 1], "the model's output was not on the GPU"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_cuda_shared_memory_in_and_out_of_a_gpu_model(protocol):
    module, server = client(protocol)
    size = 16 * 4
    a = np.arange(16, dtype=np.float32)
    b = np.arange(16, dtype=np.float32) * 3
    regions = {}
    try:
        for name in ("in0", "in1", "out0", "out1"):
            regions[name] = cudashm.create_shared_memory_region(f"{protocol}_{name}", size, 0)
            server.register_cuda_shared_memory(
                f"{protocol}_{name}", cudashm.get_raw_handle(regions[name]), 0, size)
        cudashm.set_shared_memory_region(regions["in0"], [a])
        cudashm.set_shared_memory_region(regions["in1"], [b])
        sent = [module.InferInput(f"INPUT__{i}", [16], "FP32") for i in range(2)]
        for index, tensor in enumerate(sent):
            tensor.set_shared_memory(f"{protocol}_in{index}", size)
        wanted = [module.InferRequestedOutput(f"OUTPUT__{i}") for i in range(2)]
        for index, output in enumerate(wanted):
            output.set_shared_memory(f"{protocol}_out{index}", size)
        server.infer("torch_addsub", sent, outputs=wanted)
        total = cudashm.get_contents_as_numpy(regions["out0"], np.float32, [16])
        difference = cudashm.get_contents_as_numpy(regions["out1"], np.float32, [16])
        np.testing.assert_array_equal(total, a + b)
        np.testing.assert_array_equal(difference, a - b)
    finally:
        server.unregister_cuda_shared_memory()
        for region in regions.values():
            cudashm.destroy_shared_memory_region(region)


def test_statistics_count_the_gpu_models_requests():
    stats = httpclient.InferenceServerClient(HTTP_URL).get_inference_statistics("torch_addsub")
    counted = stats["model_stats"][0]["inference_stats"]["success"]["count"]
    assert counted >= 2, stats


def test_the_gpu_instances_count_in_their_gpus_metrics_series():
    """As Triton: a GPU instance's requests under its GPU's UUID (nvidia-smi's)."""
    metrics = urllib.request.urlopen(f"http://{METRICS_URL}/metrics", timeout=5).read().decode()
    uuid = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader", "-i", "0"],
                          capture_output=True, text=True, check=True).stdout.strip()
    found = re.search(rf'^nv_inference_request_success{{gpu_uuid="{uuid}",model="torch_addsub",version="1"}} (\S+)$',
                      metrics, re.M)
    assert found and float(found.group(1)) >= 2, [line for line in metrics.splitlines() if "torch_addsub" in line]
