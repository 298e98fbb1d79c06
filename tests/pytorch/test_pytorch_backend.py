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


ACCUMULATE = """platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [
    { name: "START__2" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY__3" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
  state [ { input_name: "INPUT_STATE__1" output_name: "OUTPUT_STATE__1" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
"""


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sequences_keep_their_sum_in_implicit_state(pytorch, tmp_path, start_server, protocol):
    backends, scripts = pytorch
    model(tmp_path, "accumulate", ACCUMULATE, os.path.join(scripts, "accumulate.pt"))
    srv = start_server(str(tmp_path), "--backend-directory", backends)
    module, client = (httpclient, srv.http_client()) if protocol == "http" else (grpcclient, srv.grpc_client())

    def step(sequence, value, start=False, end=False):
        tensor = module.InferInput("INPUT__0", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[value]], np.int32))
        result = client.infer("accumulate", [tensor], sequence_id=sequence,
                              sequence_start=start, sequence_end=end)
        return int(result.as_numpy("OUTPUT__0")[0][0])

    # Two sequences interleaved: each sees only its own running sum.
    assert step(7, 1, start=True) == 1
    assert step(8, 10, start=True) == 10
    assert step(7, 2) == 3
    assert step(8, 20) == 30
    assert step(7, 3, end=True) == 6
    assert step(8, 30, end=True) == 60
    # The same correlation id again: START resets the state.
    assert step(7, 5, start=True, end=True) == 5


def test_an_unknown_sequence_gets_tritons_error(pytorch, tmp_path, start_server):
    backends, scripts = pytorch
    model(tmp_path, "accumulate", ACCUMULATE, os.path.join(scripts, "accumulate.pt"))
    srv = start_server(str(tmp_path), "--backend-directory", backends)
    tensor = httpclient.InferInput("INPUT__0", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[1]], np.int32))
    with pytest.raises(InferenceServerException) as failed:
        srv.http_client().infer("accumulate", [tensor], sequence_id=99)
    assert "must specify the START flag on the first request of the sequence" in str(failed.value)


UPPER = """platform: "pytorch_libtorch"
max_batch_size: 0
input [ { name: "INPUT__0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_STRING dims: [ -1 ] } ]
"""


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_strings_cross_as_lists_of_str(pytorch, tmp_path, start_server, protocol):
    backends, scripts = pytorch
    model(tmp_path, "upper", UPPER, os.path.join(scripts, "upper.pt"))
    srv = start_server(str(tmp_path), "--backend-directory", backends)
    module, client = (httpclient, srv.http_client()) if protocol == "http" else (grpcclient, srv.grpc_client())
    words = np.array([b"nereid", b"triton", b""], dtype=np.object_)
    tensor = module.InferInput("INPUT__0", [3], "BYTES")
    tensor.set_data_from_numpy(words)
    out = client.infer("upper", [tensor]).as_numpy("OUTPUT__0")
    assert list(out) == [b"NEREID", b"TRITON", b""]


def test_a_two_dimensional_string_input_fails_with_the_backends_words(pytorch, tmp_path, start_server):
    backends, scripts = pytorch
    model(tmp_path, "upper", UPPER.replace("dims: [ -1 ] }", "dims: [ 2, -1 ] }", 1),
          os.path.join(scripts, "upper.pt"))
    srv = start_server(str(tmp_path), "--backend-directory", backends, "--exit-on-error=false")
    index = {m["name"]: m for m in srv.http_client().get_model_repository_index()}
    assert "Triton only supports 1 dimensional List of String as input for 'INPUT__0'" \
        in index["upper"]["reason"], index


def parameters(**values):
    return "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n'
                   for k, v in values.items())


def test_backend_parameters_reach_the_backend(pytorch, tmp_path, start_server):
    backends, scripts = pytorch
    config = ADD_SUB + parameters(DISABLE_OPTIMIZED_EXECUTION="true", INFERENCE_MODE="false",
                                  ENABLE_CACHE_CLEANING="true", INTRA_OP_THREAD_COUNT="1",
                                  INTER_OP_THREAD_COUNT="1")
    model(tmp_path, "tuned", config, os.path.join(scripts, "add_sub.pt"))
    srv = start_server(str(tmp_path), "--backend-directory", backends)
    a = np.full((1, 4), 2, np.float32)
    out = srv.http_client().infer("tuned", add_sub_inputs(httpclient, a, a)).as_numpy("OUTPUT__0")
    np.testing.assert_array_equal(out, a * 2)
    log = srv.log()
    # The nereid binary's own exports are global already: no warning when a backend loads.
    assert "cannot make this library's TRITON* functions global" not in log
    # The backend logs what it made of each parameter for the instance.
    for line in ("Optimized execution is disabled for model instance 'tuned",
                 "Inference Mode is disabled for model instance 'tuned",
                 "Cache Cleaning is enabled for model instance 'tuned",
                 "Intra op thread count is set to 1 for model instance 'tuned",
                 "Inter op thread count is set to 1 for model instance 'tuned"):
        assert line in log, line


def test_a_malformed_backend_parameter_fails_the_load(pytorch, tmp_path, start_server):
    backends, scripts = pytorch
    model(tmp_path, "add_sub", ADD_SUB, os.path.join(scripts, "add_sub.pt"))
    model(tmp_path, "bad_mode", ADD_SUB + parameters(INFERENCE_MODE="sometimes"),
          os.path.join(scripts, "add_sub.pt"))
    srv = start_server(str(tmp_path), "--backend-directory", backends, "--exit-on-error=false")
    client = srv.http_client()
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["bad_mode"]["state"] == "UNAVAILABLE", index
    assert "failed to convert 'sometimes' to boolean" in index["bad_mode"]["reason"], index
    assert client.is_model_ready("add_sub")
