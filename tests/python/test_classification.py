"""The classification extension (reference section 1, server metadata; section 2,
output shared memory): a requested output with `classification: N` comes back as
the top N classes of each batch row, a BYTES tensor of "value:index[:label]"
strings, with labels from the output's `label_filename`, through tritonclient's
`InferRequestedOutput(name, class_count=N)` over HTTP and gRPC.

What is checked against Triton's code (server src/classification.cc and its
callers in http_server.cc and grpc/infer_handler.h, core src/label_provider.cc
and src/model.cc):
- values print as std::to_string does ("%f": six decimals; integers plain);
- classes are ordered by libstdc++'s std::sort on `value >`, which is not stable:
  up to 16 elements ties keep index order, past that they come out in the order
  the introsort leaves them (the Rust unit tests compare thousands of cases with
  the C++ code; here one case runs through the real binary);
- a batching model answers [batch, min(N, row)], a non-batching one [min(N, all
  elements)]; N = 0 over HTTP returns the plain output;
- BOOL/FP16/BF16/BYTES outputs, shared memory together with classification, and
  malformed counts are refused with Triton's messages; a missing label file or
  one outside the model directory fails the load with Triton's messages;
- the response cache holds the plain outputs, so a hit serves requests with and
  without classification;
- an ensemble output takes the labels of the step output it comes from.

Where Nereid differs: a malformed HTTP count is a 400 (Triton: 500), as for every
client mistake in this server.
"""

import os

import grpc
import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.service_pb2 as service_pb2
import tritonclient.grpc.service_pb2_grpc as service_pb2_grpc
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from onnx import TensorProto, helper

from conftest import EXAMPLE_MODELS, Server, base_args, expect_error

F32 = np.float32
LABELS = "zero\none\n\nthree\n"  # class 2 has an empty label: no ":label" suffix


def identity_config(name, dtype="TYPE_FP32", max_batch_size=8, dims="[ -1 ]", label="", extra=""):
    label_line = f' label_filename: "{label}"' if label else ""
    return (
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: {max_batch_size}\n'
        f'input [ {{ name: "INPUT0" data_type: {dtype} dims: {dims} }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: {dtype} dims: {dims}{label_line} }} ]\n{extra}'
    )


def write_model(repo, name, config, graph_from=None, onnx_model=None, files=None):
    """A model directory: config, version 1 (copied from an example or an ONNX model)."""
    path = os.path.join(repo, name)
    os.makedirs(os.path.join(path, "1"), exist_ok=True)
    with open(os.path.join(path, "config.pbtxt"), "w") as f:
        f.write(config)
    target = os.path.join(path, "1", "model.onnx")
    if onnx_model is not None:
        onnx.save(onnx_model, target)
    else:
        with open(os.path.join(EXAMPLE_MODELS, graph_from, "1", "model.onnx"), "rb") as src:
            data = src.read()
        with open(target, "wb") as dst:
            dst.write(data)
    for file_name, text in (files or {}).items():
        with open(os.path.join(path, file_name), "w") as f:
            f.write(text)


def rank1_identity():
    """INPUT0 -> OUTPUT0, FP32 [n]: a non-batching classifier whose scores the client sets."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "rank1",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["n"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("classification"))
    write_model(root, "scores", identity_config("scores", label="labels.txt"), "identity_fp32", files={"labels.txt": LABELS})
    write_model(root, "scores_nolabels", identity_config("scores_nolabels"), "identity_fp32")
    write_model(
        root,
        "scores_cached",
        identity_config("scores_cached", label="labels.txt", extra="response_cache { enable: true }\n"),
        "identity_fp32",
        files={"labels.txt": LABELS},
    )
    write_model(
        root,
        "flat",
        identity_config("flat", max_batch_size=0, label="labels.txt"),
        onnx_model=rank1_identity(),
        files={"labels.txt": LABELS},
    )
    write_model(root, "grid", identity_config("grid", max_batch_size=0, dims="[ -1, -1 ]"), "identity_fp32")
    for suffix, dtype in [
        ("int32", "TYPE_INT32"),
        ("uint8", "TYPE_UINT8"),
        ("int64", "TYPE_INT64"),
        ("fp64", "TYPE_FP64"),
        ("bool", "TYPE_BOOL"),
        ("fp16", "TYPE_FP16"),
        ("string", "TYPE_STRING"),
    ]:
        name = "identity_" + suffix
        write_model(root, name, identity_config(name, dtype=dtype), name)
    # An ensemble over `scores`: its output has no label file and takes the step's.
    ens = os.path.join(root, "scores_ensemble")
    os.makedirs(os.path.join(ens, "1"))
    with open(os.path.join(ens, "config.pbtxt"), "w") as f:
        f.write(
            'name: "scores_ensemble"\nplatform: "ensemble"\nmax_batch_size: 8\n'
            'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
            'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
            'ensemble_scheduling { step [ { model_name: "scores" model_version: -1 '
            'input_map { key: "INPUT0" value: "X" } output_map { key: "OUTPUT0" value: "Y" } } ] }\n'
        )
    return root


@pytest.fixture(scope="module")
def srv(repo):
    server = Server(repo, base_args(repo, ["--cache-config", "local,size=1048576", "--allow-client-shm=true"]))
    try:
        server.wait_started()
        yield server
    finally:
        server.kill()


def client_for(server, proto):
    return server.http_client() if proto == "http" else server.grpc_client()


def module_of(client):
    return httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient


def classify(client, model, values, count, dtype="FP32", binary=True, input_name="INPUT0", output="OUTPUT0"):
    """Runs `model` on `values` with `output` requested as its top `count` classes."""
    mod = module_of(client)
    values = np.asarray(values)
    inp = mod.InferInput(input_name, list(values.shape), dtype)
    inp.set_data_from_numpy(values)
    if mod is httpclient:
        out = mod.InferRequestedOutput(output, binary_data=binary, class_count=count)
    else:
        out = mod.InferRequestedOutput(output, class_count=count)
    return client.infer(model, [inp], outputs=[out])


def strings(result, output="OUTPUT0"):
    """The classification strings of `output`: a list per batch row, or one list."""
    text = lambda s: s.decode() if isinstance(s, bytes) else s  # noqa: E731
    arr = result.as_numpy(output)
    if arr.ndim == 2:
        return [[text(s) for s in row] for row in arr]
    return [text(s) for s in arr]


# --- results ----------------------------------------------------------------------


@pytest.mark.parametrize("proto,binary", [("http", True), ("http", False), ("grpc", True)])
def test_batch_top_k_with_labels(srv, proto, binary):
    client = client_for(srv, proto)
    scores = np.array([[0.1, 0.3, 0.2, 0.4], [0.9, 0.05, 0.7, 0.0]], F32)
    result = classify(client, "scores", scores, 3, binary=binary)
    out = result.get_output("OUTPUT0")
    if proto == "http":
        assert (out["datatype"], out["shape"]) == ("BYTES", [2, 3])
        assert ("data" in out) == (not binary)
    else:
        assert (out.datatype, list(out.shape)) == ("BYTES", [2, 3])
    assert strings(result) == [
        ["0.400000:3:three", "0.300000:1:one", "0.200000:2"],
        ["0.900000:0:zero", "0.700000:2", "0.050000:1:one"],
    ]


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_without_labels_and_integer_scores(srv, proto):
    client = client_for(srv, proto)
    result = classify(client, "scores_nolabels", np.array([[0.25, 0.75]], F32), 1)
    assert strings(result) == [["0.750000:1"]]
    result = classify(client, "identity_int32", np.array([[3, -7, 12, 12]], np.int32), 4, dtype="INT32")
    assert strings(result) == [["12:2", "12:3", "3:0", "-7:1"]]
    result = classify(client, "identity_uint8", np.array([[7, 255]], np.uint8), 2, dtype="UINT8")
    assert strings(result) == [["255:1", "7:0"]]
    big = np.array([[-(2**62), 2**62]], np.int64)
    assert strings(classify(client, "identity_int64", big, 1, dtype="INT64")) == [[f"{2**62}:1"]]
    result = classify(client, "identity_fp64", np.array([[1e-7, -2.5e-7, 1e20]], np.float64), 3, dtype="FP64")
    assert strings(result) == [["100000000000000000000.000000:2", "0.000000:0", "-0.000000:1"]]


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_non_batching_model_and_count_cap(srv, proto):
    client = client_for(srv, proto)
    result = classify(client, "flat", np.array([0.5, 0.25, 1.0], F32), 10)
    out = result.get_output("OUTPUT0")
    shape = out["shape"] if proto == "http" else list(out.shape)
    assert shape == [3]
    assert strings(result) == ["1.000000:2", "0.500000:0:zero", "0.250000:1:one"]
    # Without batching every element of a [2, 3] output is one class: index 0..5.
    grid = np.array([[1, 2, 3], [6, 5, 4]], F32)
    result = classify(client, "grid", grid, 2)
    shape = result.get_output("OUTPUT0")["shape"] if proto == "http" else list(result.get_output("OUTPUT0").shape)
    assert shape == [2]
    assert strings(result) == ["6.000000:3", "5.000000:4"]


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_ties_follow_libstdcxx_sort(srv, proto):
    client = client_for(srv, proto)
    # Sixteen or fewer: insertion sort, so equal scores stay in index order.
    result = classify(client, "scores_nolabels", np.array([[0.5, 1.0, 0.5, 1.0]], F32), 4)
    assert strings(result) == [["1.000000:1", "1.000000:3", "0.500000:0", "0.500000:2"]]
    # Twenty equal scores: std::sort's partition reorders them (printed by g++ 12).
    result = classify(client, "scores_nolabels", np.full((1, 20), 0.125, F32), 5)
    assert strings(result) == [[f"0.125000:{i}" for i in (10, 19, 18, 17, 16)]]


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_large_rows(srv, proto):
    # 2 x 100,000 scores (800 kB): classified off the request threads, same answer.
    client = client_for(srv, proto)
    scores = np.random.RandomState(7).permutation(200_000).astype(F32).reshape(2, 100_000)
    result = classify(client, "scores_nolabels", scores, 3)
    want = [[f"{scores[r, i]:.6f}:{i}" for i in np.argsort(-scores[r])[:3]] for r in range(2)]
    assert strings(result) == want


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_add_sub_one_output_classified_the_other_plain(server, proto):
    client = server.http_client() if proto == "http" else server.grpc_client()
    mod = module_of(client)
    a = np.array([[1.0, 2.0, 3.0, 4.0]], F32)
    b = np.array([[0.5, -1.0, 10.0, 2.25]], F32)
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        inp = mod.InferInput(name, [1, 4], "FP32")
        inp.set_data_from_numpy(value)
        inputs.append(inp)
    outputs = [mod.InferRequestedOutput("OUTPUT0", class_count=2), mod.InferRequestedOutput("OUTPUT1")]
    result = client.infer("add_sub", inputs, outputs=outputs)
    assert strings(result) == [["13.000000:2", "6.250000:3"]]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_ensemble_output_takes_the_step_labels(srv):
    for client in (srv.http_client(), srv.grpc_client()):
        result = classify(client, "scores_ensemble", np.array([[0.1, 0.9]], F32), 1, input_name="X", output="Y")
        assert strings(result, "Y") == [["0.900000:1:one"]]


def test_grpc_stream_classifies(srv):
    import queue

    client = srv.grpc_client()
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        inp = grpcclient.InferInput("INPUT0", [1, 3], "FP32")
        inp.set_data_from_numpy(np.array([[0.2, 0.1, 0.3]], F32))
        client.async_stream_infer("scores", [inp], outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)])
        result, error = answers.get(timeout=20)
    finally:
        client.stop_stream()
    assert error is None
    assert strings(result) == [["0.300000:2", "0.200000:0:zero"]]


def test_http_count_zero_returns_the_plain_output(srv):
    body = {
        "inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "FP32", "data": [0.5, 0.25]}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 0}}],
    }
    r = srv.request("POST", "/v2/models/scores/infer", body)
    assert r.status == 200, r
    out = r.json()["outputs"][0]
    assert (out["datatype"], out["shape"], out["data"]) == ("FP32", [1, 2], [0.5, 0.25])
    body["outputs"][0]["parameters"]["classification"] = 1
    out = srv.request("POST", "/v2/models/scores/infer", body).json()["outputs"][0]
    assert (out["datatype"], out["shape"], out["data"]) == ("BYTES", [1, 1], ["0.500000:0:zero"])


def test_server_metadata_lists_classification(srv):
    assert "classification" in srv.http_client().get_server_metadata()["extensions"]
    assert "classification" in list(srv.grpc_client().get_server_metadata().extensions)


# --- response cache -----------------------------------------------------------------


def cache_counts(client):
    stats = client.get_inference_statistics("scores_cached")["model_stats"][0]["inference_stats"]
    return stats["cache_hit"]["count"], stats["cache_miss"]["count"]


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_cache_hit_is_classified_on_the_way_out(srv, proto):
    client = client_for(srv, proto)
    http = srv.http_client()
    mod = module_of(client)
    values = np.array([[0.3, 0.1, 0.6]], F32) + (0.0 if proto == "http" else 0.001)
    hits, misses = cache_counts(http)
    inp = mod.InferInput("INPUT0", [1, 3], "FP32")
    inp.set_data_from_numpy(values)
    plain = client.infer("scores_cached", [inp])
    np.testing.assert_array_equal(plain.as_numpy("OUTPUT0"), values)
    top = classify(client, "scores_cached", values, 2)
    again = client.infer("scores_cached", [inp])
    top_again = classify(client, "scores_cached", values, 1)
    assert cache_counts(http) == (hits + 3, misses + 1)
    expected = [f"{values[0, 2]:.6f}:2", f"{values[0, 0]:.6f}:0:zero"]
    assert strings(top) == [expected]
    assert strings(top_again) == [expected[:1]]
    np.testing.assert_array_equal(again.as_numpy("OUTPUT0"), values)


def test_classified_request_first_fills_the_cache_with_plain_outputs(srv):
    client = srv.http_client()
    values = np.array([[0.7, 0.2, 0.1]], F32)
    hits, misses = cache_counts(client)
    assert strings(classify(client, "scores_cached", values, 1)) == [["0.700000:0:zero"]]
    inp = httpclient.InferInput("INPUT0", [1, 3], "FP32")
    inp.set_data_from_numpy(values)
    np.testing.assert_array_equal(client.infer("scores_cached", [inp]).as_numpy("OUTPUT0"), values)
    assert cache_counts(client) == (hits + 1, misses + 1)


# --- errors --------------------------------------------------------------------------


@pytest.mark.parametrize("proto", ["http", "grpc"])
@pytest.mark.parametrize(
    "model,dtype,values",
    [
        ("identity_bool", "BOOL", np.array([[True, False]])),
        ("identity_fp16", "FP16", np.array([[1.0, 2.0]], np.float16)),
        ("identity_string", "BYTES", np.array([[b"a", b"b"]], np.object_)),
    ],
)
def test_unsupported_output_types(srv, proto, model, dtype, values):
    client = client_for(srv, proto)
    e = expect_error(classify, client, model, values, 1, dtype=dtype)
    assert e.message().endswith(f"class result not available for output due to unsupported type '{dtype}'"), e.message()
    if proto == "http":
        assert e.status() == "400"
    else:
        assert e.status() == "StatusCode.INVALID_ARGUMENT"


def test_http_bad_counts(srv):
    for bad in (-1, 1.5, "2", True):
        body = {
            "inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "FP32", "data": [0.5, 0.25]}],
            "outputs": [{"name": "OUTPUT0", "parameters": {"classification": bad}}],
        }
        r = srv.request("POST", "/v2/models/scores/infer", body)
        # Triton answers 500 for this JSON type mistake; Nereid 400, as for every client mistake.
        assert r.status == 400, r
        assert r.json() == {
            "error": "Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer"
        }


def test_grpc_bad_counts(srv):
    client = srv.grpc_client()
    e = expect_error(classify, client, "scores", np.array([[0.5]], F32), -2)
    assert e.status() == "StatusCode.INVALID_ARGUMENT"
    assert e.message() == "invalid value for 'classification' parameter, expected >= 0"
    request = service_pb2.ModelInferRequest(model_name="scores")
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1])
    tensor.contents.fp32_contents.append(0.5)
    out = request.outputs.add(name="OUTPUT0")
    out.parameters["classification"].string_param = "1"
    with grpc.insecure_channel(srv.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.ModelInfer(request, timeout=20)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details() == "invalid value type for 'classification' parameter, expected int64_param"


def test_classification_with_output_shared_memory_is_refused(srv):
    # tritonclient refuses this combination itself, so the requests are built by hand.
    handle = shm.create_shared_memory_region("cls_out", "/nereid_cls_out", 64)
    try:
        http = srv.http_client()
        http.register_system_shared_memory("cls_out", "/nereid_cls_out", 64)
        body = {
            "inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "FP32", "data": [0.5, 0.25]}],
            "outputs": [
                {
                    "name": "OUTPUT0",
                    "parameters": {"classification": 1, "shared_memory_region": "cls_out", "shared_memory_byte_size": 8},
                }
            ],
        }
        r = srv.request("POST", "/v2/models/scores/infer", body)
        assert r.status == 400, r
        assert r.json() == {"error": "Output can't set both 'shared_memory_region' and 'classification'"}

        request = service_pb2.ModelInferRequest(model_name="scores")
        tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 2])
        tensor.contents.fp32_contents.extend([0.5, 0.25])
        out = request.outputs.add(name="OUTPUT0")
        out.parameters["classification"].int64_param = 1
        out.parameters["shared_memory_region"].string_param = "cls_out"
        out.parameters["shared_memory_byte_size"].int64_param = 8
        with grpc.insecure_channel(srv.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.RpcError) as err:
                stub.ModelInfer(request, timeout=20)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details() == "output can't set both 'shared_memory_region' and 'classification'"
        http.unregister_system_shared_memory("cls_out")
    finally:
        shm.destroy_shared_memory_region(handle)


# --- label files at load ---------------------------------------------------------------


def test_label_file_errors_fail_the_load(tmp_path, start_server):
    repo = str(tmp_path / "models")
    os.makedirs(repo)
    write_model(repo, "missing", identity_config("missing", label="nope.txt"), "identity_fp32")
    write_model(repo, "outside", identity_config("outside", label="../secret.txt"), "identity_fp32")
    write_model(repo, "good", identity_config("good", label="labels.txt"), "identity_fp32", files={"labels.txt": "a\n"})
    with open(os.path.join(repo, "secret.txt"), "w") as f:
        f.write("x\n")
    srv = start_server(repo, "--model-control-mode", "explicit")
    client = srv.http_client()
    e = expect_error(client.load_model, "missing")
    path = os.path.join(repo, "missing", "nope.txt")
    assert f"failed to open text file for read {path}: No such file or directory" in e.message(), e.message()
    e = expect_error(srv.grpc_client().load_model, "outside")
    path = os.path.join(repo, "outside", "../secret.txt")
    assert (
        f"label file path '{path}' for output 'OUTPUT0' in model 'outside' is outside model directory" in e.message()
    ), e.message()
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["missing"]["state"] == "UNAVAILABLE"
    assert "failed to open text file for read" in index["missing"]["reason"]
    client.load_model("good")
    assert strings(classify(client, "good", np.array([[0.0, 1.0]], F32), 2)) == [["1.000000:1", "0.000000:0:a"]]
    # The labels are read at load: changing the file changes nothing until a reload.
    with open(os.path.join(repo, "good", "labels.txt"), "w") as f:
        f.write("b\nc\n")
    assert strings(classify(client, "good", np.array([[0.0, 1.0]], F32), 1)) == [["1.000000:1"]]
    client.load_model("good")
    assert strings(classify(client, "good", np.array([[0.0, 1.0]], F32), 1)) == [["1.000000:1:c"]]
