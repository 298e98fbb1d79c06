"""Repository load requests as Triton's own model-control examples use them:
errors in Triton's words ("failed to load '<model>', failed to poll from model
repository" with the reason after it), and `file:` overrides, over HTTP (base64
text) and gRPC (bytes).

Triton 2.51 answers every one of these failures with the bare prefix and no
reason, and aborts on a path component longer than 255 bytes (measured with
../shared/triton). Nereid names the reason and refuses bad paths before writing
anything: a path leaving the model directory 400 / INVALID_ARGUMENT (Triton's
status), one beyond the filesystem's limits 500 / INTERNAL (the status Triton's
own simple_grpc_model_control.py expects for it).
"""

import json
import os

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import EXAMPLE_MODELS, add_sub_config

PREFIX = "failed to load 'add_sub', failed to poll from model repository: "
ADD_SUB_JSON = {
    "name": "add_sub",
    "platform": "onnxruntime_onnx",
    "max_batch_size": 4,
    "input": [
        {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]},
    ],
    "output": [
        {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]},
    ],
}


@pytest.fixture
def explicit(make_repo, start_server):
    repo = make_repo(["add_sub"])
    server = start_server(repo, "--model-control-mode", "explicit", "--load-model", "add_sub")
    return server, server.http_client(), server.grpc_client()


def model_bytes(name="add_sub"):
    with open(os.path.join(EXAMPLE_MODELS, name, "1", "model.onnx"), "rb") as f:
        return f.read()


def run(client_module, client, model, batch=1):
    a = np.full((batch, 4), 3.0, np.float32)
    b = np.ones((batch, 4), np.float32)
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        inp = client_module.InferInput(name, [batch, 4], "FP32")
        inp.set_data_from_numpy(value)
        inputs.append(inp)
    return client.infer(model, inputs).as_numpy("OUTPUT0")


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_bad_override_config_answers_failed_to_load_with_the_reason(explicit, error_of, proto):
    server, http, grpc_ = explicit
    client = http if proto == "http" else grpc_
    # The malformed JSON from Triton's simple_*_model_control.py examples.
    e = error_of(client.load_model, "add_sub", config='"parameters": {"config": {{"max_batch_size": "16"}}}')
    assert e.message().startswith(PREFIX + "failed to parse model configuration JSON"), e.message()
    assert e.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    e = error_of(client.load_model, "add_sub", config='{"bogus_field": 1}')
    assert e.message().startswith(PREFIX) and "bogus_field" in e.message(), e.message()
    # The loaded version kept serving through both failures.
    np.testing.assert_array_equal(run(httpclient, http, "add_sub"), np.full((1, 4), 4.0))


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_file_override_loads_from_the_given_files(explicit, proto):
    server, http, grpc_ = explicit
    client = http if proto == "http" else grpc_
    config = dict(ADD_SUB_JSON, max_batch_size=2)
    client.load_model("add_sub", config=json.dumps(config), files={"file:1/model.onnx": model_bytes()})
    assert http.get_model_config("add_sub")["max_batch_size"] == 2
    np.testing.assert_array_equal(run(grpcclient, grpc_, "add_sub", batch=2), np.full((2, 4), 4.0))
    # A model that is not in the repository at all can be loaded from files alone.
    other = dict(ADD_SUB_JSON, name="from_files")
    client.load_model("from_files", config=json.dumps(other), files={"file:3/model.onnx": model_bytes()})
    index = {(m["name"], m.get("version")) for m in http.get_model_repository_index()}
    assert ("from_files", "3") in index
    np.testing.assert_array_equal(run(httpclient, http, "from_files"), np.full((1, 4), 4.0))
    # A plain load reads the repository again.
    client.load_model("add_sub")
    assert http.get_model_config("add_sub")["max_batch_size"] == 8


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_bad_file_parameters_are_refused_before_anything_is_written(explicit, error_of, proto):
    server, http, grpc_ = explicit
    client = http if proto == "http" else grpc_
    invalid = "400" if proto == "http" else "StatusCode.INVALID_ARGUMENT"
    config = json.dumps(ADD_SUB_JSON)
    internal = "500" if proto == "http" else "StatusCode.INTERNAL"
    cases = [
        # Beyond the filesystem's limits: INTERNAL, as Triton's simple_grpc_model_control.py checks.
        ("file:" + "A" * 256, internal, "a path component is longer than 255 bytes"),
        ("file:../escape.onnx", invalid, "the path must be relative and stay within the model directory"),
        ("file:/etc/model.onnx", invalid, "the path must be relative and stay within the model directory"),
        ("file:", invalid, "the path names no file"),
    ]
    for key, status, why in cases:
        e = error_of(client.load_model, "add_sub", config=config, files={key: b"x"})
        assert (e.status(), e.message()) == (status, f"{PREFIX}Invalid file parameter '{key}': {why}")
    e = error_of(client.load_model, "add_sub", files={"file:1/model.onnx": b"x"})
    assert (e.status(), e.message()) == (
        invalid,
        PREFIX + "Load parameter 'config' must be specified for model file override",
    )
    e = error_of(client.load_model, "add_sub", config=config, files={"file:1": b"x", "file:1/model.onnx": b"y"})
    assert e.status() == invalid and "directory has been created as a file" in e.message(), e.message()
    # Files that are not a model the backend can load: the backend's reason.
    e = error_of(client.load_model, "add_sub", config=config, files={"file:1/model.onnx": b"not onnx"})
    assert "add_sub" in e.message() and "version 1" in e.message(), e.message()
    assert server.request("GET", "/v2/health/live").status == 200
    np.testing.assert_array_equal(run(httpclient, http, "add_sub"), np.full((1, 4), 4.0))
    assert not [d for d in os.listdir("/tmp") if d.startswith("nereid-load-")]


def test_http_file_parameters_must_be_base64_text(explicit):
    server, http, _ = explicit
    for value, why in ((5, "must hold the file's content as base64 text"), ("!!!", "is not valid base64")):
        body = {"parameters": {"config": json.dumps(ADD_SUB_JSON), "file:1/model.onnx": value}}
        resp = server.request("POST", "/v2/repository/models/add_sub/load", json.dumps(body).encode())
        assert resp.status == 400
        assert resp.json()["error"].startswith(PREFIX + "File parameter 'file:1/model.onnx' " + why), resp.json()


def test_grpc_file_parameters_must_be_bytes(explicit):
    server, _, grpc_ = explicit
    from tritonclient.grpc import service_pb2

    request = service_pb2.RepositoryModelLoadRequest(model_name="add_sub")
    request.parameters["config"].string_param = json.dumps(ADD_SUB_JSON)
    request.parameters["file:1/model.onnx"].string_param = "text"
    with pytest.raises(Exception) as raised:
        grpc_._client_stub.RepositoryModelLoad(request)
    assert "File parameter 'file:1/model.onnx' must have bytes type for its value" in str(raised.value)
