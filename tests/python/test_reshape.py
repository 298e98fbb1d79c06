"""`reshape` on configured inputs and outputs, as Triton applies it.

Triton's own `densenet_onnx` example configures input `data_0` with dims
[3,224,224] and `reshape { shape: [1,3,224,224] }`, output `fc6_1` with dims
[1000] and `reshape { shape: [1,1000,1,1] }`, and max_batch_size 0. What Triton
does (core `src/infer_request.cc` Normalize, `src/infer_response.cc`
Output::Reshape, `src/model_config_utils.cc` ValidateIOShape; onnxruntime_backend
`src/onnxruntime.cc` ValidateInputs/ValidateOutputs):

- clients send an input with the config `dims` (after the batch dimension when
  max_batch_size > 0) and the model gets it in the `reshape` shape, the batch
  dimension kept in front; -1 dimensions carry their values over, in order;
- an output the model produces in its `reshape` shape reaches the client with
  the config `dims` (plus the batch dimension), also from the response cache,
  and model metadata shows `dims`;
- the ONNX graph is checked against the `reshape` shape at load;
- a reshape whose element count differs from the dims fails the load with
  "model input '<name>' has different size for dims and reshape for <model>".

The models are built here with the `onnx` package: `densenet_tiny` (the densenet
configuration at [3,4,4] -> [10]), `reshape_batch` (max_batch_size 8 with
dynamic batching, a fixed and a variable-size reshape on inputs and outputs) and
an ensemble with reshapes of its own in front of `densenet_tiny`.
"""

import json
import os
import threading

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

from conftest import run_in_threads
from make_models import IR_VERSION, OPSET

F32 = np.float32
# densenet_tiny's weights: fc6_1 = data_0 flattened @ W + B.
W = (np.arange(48 * 10, dtype=F32).reshape(48, 10) % 7 - 3) / 4
B = np.arange(10, dtype=F32) / 8
# reshape_batch: OUT = IN (12 values a row) @ W2, as [batch, 2, 3, 1].
W2 = (np.arange(12 * 6, dtype=F32).reshape(12, 6) % 5 - 2) / 2

DENSENET_CONFIG = """name: "densenet_tiny"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [
  {
    name: "data_0"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 4, 4 ]
    reshape { shape: [ 1, 3, 4, 4 ] }
  }
]
output [
  {
    name: "fc6_1"
    data_type: TYPE_FP32
    dims: [ 10 ]
    reshape { shape: [ 1, 10, 1, 1 ] }
    label_filename: "densenet_labels.txt"
  }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

BATCH_CONFIG = """name: "reshape_batch"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "IN" data_type: TYPE_FP32 dims: [ 3, 4 ] reshape { shape: [ 12 ] } },
  { name: "V" data_type: TYPE_FP32 dims: [ -1, 2 ] reshape { shape: [ -1, 1, 2 ] } }
]
output [
  { name: "OUT" data_type: TYPE_FP32 dims: [ 6 ] reshape { shape: [ 2, 3, 1 ] } },
  { name: "VOUT" data_type: TYPE_FP32 dims: [ -1, 2 ] reshape { shape: [ -1, 1, 2 ] } }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
dynamic_batching { preferred_batch_size: [ 3 ] max_queue_delay_microseconds: %d }
"""

# A non-batching ensemble with reshapes of its own: the client sends 48 values
# and gets [2, 5]; densenet_tiny between them sees [3, 4, 4] and answers [10].
ENSEMBLE_CONFIG = """name: "ens_reshape"
platform: "ensemble"
max_batch_size: 0
input [ { name: "PIXELS" data_type: TYPE_FP32 dims: [ 48 ] reshape { shape: [ 3, 4, 4 ] } } ]
output [ { name: "SCORES" data_type: TYPE_FP32 dims: [ 2, 5 ] reshape { shape: [ 10 ] } } ]
ensemble_scheduling { step [ { model_name: "densenet_tiny" model_version: -1
  input_map { key: "data_0" value: "PIXELS" } output_map { key: "fc6_1" value: "SCORES" } } ] }
"""


def _model(graph):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def densenet_tiny_onnx():
    """data_0 [1,3,4,4] -> flatten @ W + B -> fc6_1 [1,10,1,1], like densenet's ranks."""
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("Flatten", ["data_0"], ["flat"], axis=1),
            helper.make_node("MatMul", ["flat", "W"], ["mm"]),
            helper.make_node("Add", ["mm", "B"], ["scores"]),
            helper.make_node("Reshape", ["scores", "shape"], ["fc6_1"]),
        ],
        "densenet_tiny",
        [vi("data_0", TensorProto.FLOAT, [1, 3, 4, 4])],
        [vi("fc6_1", TensorProto.FLOAT, [1, 10, 1, 1])],
        initializer=[
            numpy_helper.from_array(W, "W"),
            numpy_helper.from_array(B, "B"),
            numpy_helper.from_array(np.array([1, 10, 1, 1], np.int64), "shape"),
        ],
    )
    return _model(graph)


def reshape_batch_onnx():
    """IN [batch,12] @ W2 -> OUT [batch,2,3,1]; V [batch,n,1,2] -> VOUT (identity)."""
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["IN", "W2"], ["mm"]),
            helper.make_node("Reshape", ["mm", "shape"], ["OUT"]),
            helper.make_node("Identity", ["V"], ["VOUT"]),
        ],
        "reshape_batch",
        [
            vi("IN", TensorProto.FLOAT, ["batch", 12]),
            vi("V", TensorProto.FLOAT, ["batch", "n", 1, 2]),
        ],
        [
            vi("OUT", TensorProto.FLOAT, ["batch", 2, 3, 1]),
            vi("VOUT", TensorProto.FLOAT, ["batch", "n", 1, 2]),
        ],
        initializer=[
            numpy_helper.from_array(W2, "W2"),
            numpy_helper.from_array(np.array([-1, 2, 3, 1], np.int64), "shape"),
        ],
    )
    return _model(graph)


def write_model(repo, name, config, model=None):
    os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(config)
    if model is not None:
        onnx.save(model, os.path.join(repo, name, "1", "model.onnx"))


@pytest.fixture
def repo(tmp_path):
    """A repository with densenet_tiny (and its labels file) and ens_reshape;
    repo(delay_us) adds reshape_batch with that max_queue_delay."""
    root = str(tmp_path / "models")
    write_model(root, "densenet_tiny", DENSENET_CONFIG, densenet_tiny_onnx())
    with open(os.path.join(root, "densenet_tiny", "densenet_labels.txt"), "w") as f:
        f.write("".join(f"label{i}\n" for i in range(10)))
    write_model(root, "ens_reshape", ENSEMBLE_CONFIG)

    def make(delay_us=0):
        write_model(root, "reshape_batch", BATCH_CONFIG % delay_us, reshape_batch_onnx())
        return root

    return make


def densenet_reference(image):
    return image.reshape(48) @ W + B


def image(seed):
    return np.random.RandomState(seed).standard_normal((3, 4, 4)).astype(F32)


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_non_batching_model_takes_dims_and_answers_dims(repo, start_server, module, binary):
    srv = start_server(repo())
    client = srv.http_client() if module is httpclient else srv.grpc_client()
    try:
        x = image(1)
        inp = module.InferInput("data_0", [3, 4, 4], "FP32")
        if module is httpclient:
            inp.set_data_from_numpy(x, binary_data=binary)
            outputs = [httpclient.InferRequestedOutput("fc6_1", binary_data=binary)]
        else:
            inp.set_data_from_numpy(x)
            outputs = None
        result = client.infer("densenet_tiny", [inp], outputs=outputs)
        got = result.as_numpy("fc6_1")
        assert got.shape == (10,)
        np.testing.assert_allclose(got, densenet_reference(x), rtol=1e-5, atol=1e-5)
        out = result.get_output("fc6_1")
        shape = out["shape"] if module is httpclient else list(out.shape)
        assert shape == [10]
    finally:
        client.close()


def test_config_and_metadata_show_dims_and_reshape(repo, start_server):
    srv = start_server(repo())
    with srv.http_client() as client:
        cfg = client.get_model_config("densenet_tiny")
        assert cfg["input"][0]["dims"] == [3, 4, 4]
        assert cfg["input"][0]["reshape"] == {"shape": [1, 3, 4, 4]}
        assert cfg["output"][0]["reshape"] == {"shape": [1, 10, 1, 1]}
        assert cfg["output"][0]["label_filename"] == "densenet_labels.txt"
        meta = client.get_model_metadata("densenet_tiny")
        assert [(t["name"], t["shape"]) for t in meta["inputs"]] == [("data_0", [3, 4, 4])]
        assert [(t["name"], t["shape"]) for t in meta["outputs"]] == [("fc6_1", [10])]
        meta = client.get_model_metadata("reshape_batch")
        assert [(t["name"], t["shape"]) for t in meta["inputs"]] == [
            ("IN", [-1, 3, 4]),
            ("V", [-1, -1, 2]),
        ]
    with srv.grpc_client() as client:
        cfg = client.get_model_config("densenet_tiny").config
        assert list(cfg.input[0].reshape.shape) == [1, 3, 4, 4]
        assert list(cfg.output[0].reshape.shape) == [1, 10, 1, 1]


def test_the_client_shape_is_still_checked_against_dims(repo, start_server, error_of):
    srv = start_server(repo())
    with srv.http_client() as client:
        # The reshape shape is what the model sees, not what clients send.
        inp = httpclient.InferInput("data_0", [1, 3, 4, 4], "FP32")
        inp.set_data_from_numpy(image(2).reshape(1, 3, 4, 4))
        e = error_of(client.infer, "densenet_tiny", [inp])
        assert e.message() == (
            "[request id: <id_unknown>] unexpected shape for input 'data_0' for model "
            "'densenet_tiny'. Expected [3,4,4], got [1,3,4,4]"
        )


def batch_inputs(module, rows, n):
    """reshape_batch inputs of `rows` rows: IN [rows,3,4] and V [rows,n,2]."""
    x = np.arange(rows * 12, dtype=F32).reshape(rows, 3, 4) / 10 + rows
    v = np.arange(rows * n * 2, dtype=F32).reshape(rows, n, 2) - rows
    inputs = []
    for name, data in (("IN", x), ("V", v)):
        inp = module.InferInput(name, list(data.shape), "FP32")
        inp.set_data_from_numpy(data)
        inputs.append(inp)
    return x, v, inputs


def check_batch_result(result, x, v):
    out = result.as_numpy("OUT")
    assert out.shape == (x.shape[0], 6)
    np.testing.assert_allclose(out, x.reshape(-1, 12) @ W2, rtol=1e-5, atol=1e-5)
    vout = result.as_numpy("VOUT")
    assert vout.shape == v.shape
    np.testing.assert_array_equal(vout, v)


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_batching_model_keeps_the_batch_dimension(repo, start_server, module):
    srv = start_server(repo())
    client = srv.http_client() if module is httpclient else srv.grpc_client()
    try:
        for rows, n in ((1, 1), (1, 3), (5, 2), (8, 4)):
            x, v, inputs = batch_inputs(module, rows, n)
            check_batch_result(client.infer("reshape_batch", inputs), x, v)
    finally:
        client.close()


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_dynamically_batched_requests_each_get_their_dims(repo, start_server, module):
    # A request of 1 row and one of 2 rows fill the preferred batch size of 3 and
    # execute together (each waits up to 5 s for the other).
    srv = start_server(repo(5_000_000))
    failures = []
    barrier = threading.Barrier(2)

    def worker(index):
        client = srv.http_client() if module is httpclient else srv.grpc_client()
        try:
            x, v, inputs = batch_inputs(module, index + 1, 3)
            barrier.wait()
            check_batch_result(client.infer("reshape_batch", inputs), x, v)
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(repr(e))
        finally:
            client.close()

    run_in_threads(worker, 2)
    assert failures == []
    with srv.http_client() as client:
        stats = client.get_inference_statistics("reshape_batch")["model_stats"][0]
    assert (stats["inference_count"], stats["execution_count"]) == (3, 1)
    assert [b["batch_size"] for b in stats["batch_stats"]] == [3]


def test_ensemble_applies_its_own_reshapes(repo, start_server):
    srv = start_server(repo())
    x = image(3)
    with srv.http_client() as client:
        inp = httpclient.InferInput("PIXELS", [48], "FP32")
        inp.set_data_from_numpy(x.reshape(48))
        got = client.infer("ens_reshape", [inp]).as_numpy("SCORES")
    assert got.shape == (2, 5)
    np.testing.assert_allclose(got.reshape(10), densenet_reference(x), rtol=1e-5, atol=1e-5)
    with srv.grpc_client() as client:
        inp = grpcclient.InferInput("PIXELS", [48], "FP32")
        inp.set_data_from_numpy(x.reshape(48))
        assert client.infer("ens_reshape", [inp]).as_numpy("SCORES").shape == (2, 5)


def test_a_cached_answer_keeps_the_client_shape(repo, start_server):
    root = repo()
    with open(os.path.join(root, "densenet_tiny", "config.pbtxt"), "a") as f:
        f.write("response_cache { enable: true }\n")
    srv = start_server(root, "--cache-config", "local,size=1048576")
    x = image(4)
    for module, client in ((httpclient, srv.http_client()), (grpcclient, srv.grpc_client())):
        try:
            inp = module.InferInput("data_0", [3, 4, 4], "FP32")
            inp.set_data_from_numpy(x)
            got = client.infer("densenet_tiny", [inp]).as_numpy("fc6_1")
            assert got.shape == (10,)
            np.testing.assert_allclose(got, densenet_reference(x), rtol=1e-5, atol=1e-5)
        finally:
            client.close()
    with srv.http_client() as client:
        stats = client.get_inference_statistics("densenet_tiny")["model_stats"][0]
    assert stats["inference_stats"]["cache_miss"]["count"] == 1
    assert stats["inference_stats"]["cache_hit"]["count"] == 1


def test_a_reshape_of_another_size_fails_the_load(repo, start_server, error_of):
    root = repo()
    bad = DENSENET_CONFIG.replace(
        'name: "densenet_tiny"', 'name: "bad_reshape"'
    ).replace("shape: [ 1, 3, 4, 4 ]", "shape: [ 1, 3, 4, 5 ]")
    write_model(root, "bad_reshape", bad, densenet_tiny_onnx())
    srv = start_server(root, "--model-control-mode", "explicit", "--load-model", "densenet_tiny")
    message = "model input 'data_0' has different size for dims and reshape for bad_reshape"
    with srv.http_client() as client:
        e = error_of(client.load_model, "bad_reshape")
        assert e.message() == (
            f"load failed for model 'bad_reshape': version 1 is at UNAVAILABLE state: {message};"
        )
        assert not client.is_model_ready("bad_reshape")
    with srv.grpc_client() as client:
        e = error_of(client.load_model, "bad_reshape")
        assert message in e.message(), e.message()
    # A load-API override is validated the same way.
    with srv.http_client() as client:
        config = client.get_model_config("densenet_tiny")
        config["output"][0]["reshape"] = {"shape": [1, 10, 2]}
        e = error_of(client.load_model, "densenet_tiny", config=json.dumps(config))
        assert (
            "model output 'fc6_1' has different size for dims and reshape for densenet_tiny"
            in e.message()
        ), e.message()
        # The loaded version keeps serving.
        assert client.is_model_ready("densenet_tiny")


def test_the_graph_is_checked_against_the_reshape(repo, start_server, error_of):
    root = repo()
    # Dims and reshape agree in size, but the graph is [1,3,4,4], not [3,16].
    other = DENSENET_CONFIG.replace('name: "densenet_tiny"', 'name: "wrong_rank"').replace(
        "shape: [ 1, 3, 4, 4 ]", "shape: [ 3, 16 ]"
    )
    write_model(root, "wrong_rank", other, densenet_tiny_onnx())
    # Labels are read at load too; give it its file so only the shape can fail.
    with open(os.path.join(root, "wrong_rank", "densenet_labels.txt"), "w") as f:
        f.write("".join(f"class_{i}\n" for i in range(10)))
    srv = start_server(root, "--model-control-mode", "explicit", "--load-model", "densenet_tiny")
    with srv.http_client() as client:
        e = error_of(client.load_model, "wrong_rank")
    assert (
        "model 'wrong_rank', tensor 'data_0': the model expects 4 dimensions (shape [1,3,4,4]) "
        "but the model configuration specifies 2 dimensions (shape [3,16])" in e.message()
    ), e.message()
