"""TorchScript models served by Triton's own pytorch backend (r24.10, built from source by
scripts/build_pytorch_backend.sh against PyPI's torch 2.5.1) hosted by the nereid binary,
driven with tritonclient over HTTP and gRPC."""

import os
import shutil

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(300)

ADD_SUB = """platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
"""

IDENTITY = """backend: "pytorch"
max_batch_size: 0
input [ {{ name: "INPUT__0" data_type: {dtype} dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT__0" data_type: {dtype} dims: [ -1 ] }} ]
"""

DTYPES = {"TYPE_FP32": np.float32, "TYPE_FP64": np.float64, "TYPE_INT32": np.int32,
          "TYPE_INT64": np.int64, "TYPE_INT8": np.int8, "TYPE_UINT8": np.uint8, "TYPE_BOOL": np.bool_}


def model(repo, name, config, script, file_name="model.pt"):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    if script:
        shutil.copy(script, repo / name / "1" / file_name)


@pytest.fixture
def served(pytorch, tmp_path, start_server):
    backends, scripts = pytorch
    model(tmp_path, "add_sub", ADD_SUB, os.path.join(scripts, "add_sub.pt"))
    for dtype in DTYPES:
        model(tmp_path, f"identity_{dtype[5:].lower()}", IDENTITY.format(dtype=dtype),
              os.path.join(scripts, "identity.pt"))
    return start_server(str(tmp_path), "--backend-directory", backends)


def add_sub_inputs(module, a, b):
    inputs = [module.InferInput("INPUT0", list(a.shape), "FP32"), module.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_add_sub_over_both_protocols(served, protocol):
    module, client = (httpclient, served.http_client()) if protocol == "http" else (grpcclient, served.grpc_client())
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.ones((2, 4), np.float32)
    result = client.infer("add_sub", add_sub_inputs(module, a, b))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__1"), a - b)


def test_identity_over_dtypes(served):
    client = served.http_client()
    for dtype, np_type in DTYPES.items():
        data = np.array([1, 0, 3], dtype=np_type)
        tensor = httpclient.InferInput("INPUT__0", [3], dtype[5:] if dtype != "TYPE_FP32" else "FP32")
        tensor.set_data_from_numpy(data)
        result = client.infer(f"identity_{dtype[5:].lower()}", [tensor])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), data)


def test_concurrent_requests_are_batched(served):
    import concurrent.futures

    a = np.ones((1, 4), np.float32)

    def one(i):
        client = served.http_client()
        return client.infer("add_sub", add_sub_inputs(httpclient, a * i, a)).as_numpy("OUTPUT__0")

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(16)))
    for i, out in enumerate(results):
        np.testing.assert_array_equal(out, a * i + 1)
    stats = served.http_client().get_inference_statistics("add_sub")["model_stats"][0]
    assert stats["inference_count"] == 16
    assert stats["execution_count"] < 16, stats


def test_a_missing_model_file_fails_its_load_as_triton_says(pytorch, tmp_path, start_server):
    backends, scripts = pytorch
    model(tmp_path, "add_sub", ADD_SUB, os.path.join(scripts, "add_sub.pt"))
    model(tmp_path, "no_file", ADD_SUB, None)
    srv = start_server(str(tmp_path), "--backend-directory", backends, "--exit-on-error=false")
    client = srv.http_client()
    assert client.is_model_ready("add_sub")
    assert not client.is_model_ready("no_file")
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert "unable to find" in index["no_file"]["reason"] and "model.pt" in index["no_file"]["reason"], index


def test_default_model_filename_is_honoured(pytorch, tmp_path, start_server):
    backends, scripts = pytorch
    model(tmp_path, "renamed", ADD_SUB + 'default_model_filename: "traced.pt"\n',
          os.path.join(scripts, "add_sub.pt"), file_name="traced.pt")
    srv = start_server(str(tmp_path), "--backend-directory", backends)
    a = np.ones((1, 4), np.float32)
    out = srv.http_client().infer("renamed", add_sub_inputs(httpclient, a, a)).as_numpy("OUTPUT__1")
    np.testing.assert_array_equal(out, np.zeros((1, 4), np.float32))


def test_a_config_with_more_inputs_than_the_model_fails_its_load(pytorch, tmp_path, start_server):
    backends, scripts = pytorch
    wrong = ADD_SUB.replace('{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }',
                            '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }, '
                            '{ name: "INPUT2" data_type: TYPE_FP32 dims: [ 4 ] }')
    model(tmp_path, "add_sub", ADD_SUB, os.path.join(scripts, "add_sub.pt"))
    model(tmp_path, "wrong_inputs", wrong, os.path.join(scripts, "add_sub.pt"))
    srv = start_server(str(tmp_path), "--backend-directory", backends, "--exit-on-error=false")
    client = srv.http_client()
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["wrong_inputs"]["state"] == "UNAVAILABLE", index
    assert "unable to load model 'wrong_inputs', configuration expects 3 inputs, model provides 2" \
        in index["wrong_inputs"]["reason"], index
    assert client.is_model_ready("add_sub")
