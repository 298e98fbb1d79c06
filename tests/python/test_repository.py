"""Model repository extension: index, load, unload, config override, broken
configs, in `explicit` and `none` model control modes. Statuses and texts
measured on Triton 2.51 unless a comment says otherwise."""

import json
import os
import shutil
import re
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import EXAMPLE_MODELS, add_sub_config

# A `{` where a value should be: a syntax error on line 3.
BROKEN_SYNTAX = """\
name: "broken_syntax"
platform: "onnxruntime_onnx"
max_batch_size: 8 {
"""

# Parses as text format but names a field ModelConfig does not have: line 4.
BROKEN_FIELD = """\
name: "broken_field"
platform: "onnxruntime_onnx"
max_batch_size: 8
bogus_field: 3
"""

# Valid config that cannot load on a machine without GPUs.
GPU_ONLY = add_sub_config(name="add_sub_gpu", kind="KIND_GPU")

ALL_MODELS = ["add_sub", "add_sub_gpu", "broken_field", "broken_syntax", "identity_fp32"]


@pytest.fixture
def explicit(make_repo, start_server):
    repo = make_repo(
        ["add_sub", "identity_fp32"],
        {"broken_syntax": BROKEN_SYNTAX, "broken_field": BROKEN_FIELD, "add_sub_gpu": GPU_ONLY},
    )
    server = start_server(repo, "--model-control-mode", "explicit")
    http, grpc_ = server.http_client(), server.grpc_client()
    yield server, http, grpc_
    http.close()
    grpc_.close()


def index(server, ready=None):
    body = None if ready is None else {"ready": ready}
    resp = server.request("POST", "/v2/repository/index", body)
    assert resp.status == 200, resp
    return resp.json()


def entry(server, name):
    matches = [e for e in index(server) if e["name"] == name]
    assert len(matches) == 1, index(server)
    return matches[0]


def infer_add_sub(client_module, client, batch=1, model="add_sub"):
    a = np.full((batch, 4), 2.0, np.float32)
    b = np.ones((batch, 4), np.float32)
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        inp = client_module.InferInput(name, [batch, 4], "FP32")
        inp.set_data_from_numpy(value)
        inputs.append(inp)
    result = client.infer(model, inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    return result


def test_explicit_mode_starts_with_nothing_loaded(explicit, error_of):
    server, http, grpc_ = explicit
    # Never-loaded models are listed by name only: Triton knows no version or
    # state for them yet.
    assert index(server) == [{"name": n} for n in ALL_MODELS]
    assert http.get_model_repository_index() == index(server)
    assert grpc_.get_model_repository_index(as_json=True) == {"models": [{"name": n} for n in ALL_MODELS]}
    assert index(server, ready=True) == []
    # `ready: false` is no filter at all.
    assert index(server, ready=False) == index(server)
    assert not http.is_model_ready("add_sub")
    e = error_of(http.infer, "add_sub", [])
    assert (e.status(), e.message()) == ("404", "Request for unknown model: 'add_sub' is not found")


def test_load_unload_cycle(explicit, poll, error_of):
    server, http, grpc_ = explicit
    http.load_model("add_sub")
    assert http.is_model_ready("add_sub")
    infer_add_sub(httpclient, http)
    assert entry(server, "add_sub") == {"name": "add_sub", "version": "1", "state": "READY"}
    assert index(server, ready=True) == [{"name": "add_sub", "version": "1", "state": "READY"}]

    grpc_.load_model("identity_fp32")
    assert grpc_.is_model_ready("identity_fp32")
    assert [e["name"] for e in index(server, ready=True)] == ["add_sub", "identity_fp32"]

    grpc_.unload_model("add_sub")
    # Unloading finishes in the background (Triton shows UNLOADING meanwhile).
    poll(
        lambda: entry(server, "add_sub") == {"name": "add_sub", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
        what="add_sub to reach UNAVAILABLE/unloaded",
    )
    assert not http.is_model_ready("add_sub")
    assert not grpc_.is_model_ready("add_sub")
    e = error_of(infer_add_sub, grpcclient, grpc_)
    assert (e.status(), e.message()) == (
        "StatusCode.NOT_FOUND",
        "Request for unknown model: 'add_sub' has no available versions",
    )
    e = error_of(infer_add_sub, httpclient, http)
    assert (e.status(), e.message()) == ("404", "Request for unknown model: 'add_sub' has no available versions")
    assert [e["name"] for e in index(server, ready=True)] == ["identity_fp32"]

    # Load again; unloading twice or an unknown name is not an error.
    http.load_model("add_sub")
    infer_add_sub(grpcclient, grpc_)
    http.unload_model("identity_fp32")
    http.unload_model("identity_fp32")
    grpc_.unload_model("nope")
    resp = server.request("POST", "/v2/repository/models/nope/unload")
    assert (resp.status, resp.body) == (200, b"")


def test_load_with_config_override(explicit, error_of):
    server, http, grpc_ = explicit
    with open(os.path.join(server.repo, "add_sub", "config.pbtxt")) as f:
        assert "max_batch_size: 8" in f.read()
    override = {
        "name": "add_sub",
        "platform": "onnxruntime_onnx",
        "max_batch_size": 2,
        "input": [
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
            {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]},
        ],
        "output": [
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
            {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]},
        ],
    }
    http.load_model("add_sub", config=json.dumps(override))
    assert http.get_model_config("add_sub")["max_batch_size"] == 2
    assert grpc_.get_model_config("add_sub").config.max_batch_size == 2
    infer_add_sub(httpclient, http, batch=2)
    e = error_of(infer_add_sub, httpclient, http, batch=4)
    assert (e.status(), e.message()) == (
        "400",
        "[request id: <id_unknown>] inference request batch-size must be <= 2 for 'add_sub'",
    )
    # Loading without an override reads config.pbtxt again.
    grpc_.load_model("add_sub")
    assert http.get_model_config("add_sub")["max_batch_size"] == 8
    infer_add_sub(grpcclient, grpc_, batch=8)
    # The override over gRPC.
    grpc_.load_model("add_sub", config=json.dumps(dict(override, max_batch_size=3)))
    assert grpc_.get_model_config("add_sub").config.max_batch_size == 3


def test_load_unknown_model(explicit, error_of):
    server, http, grpc_ = explicit
    e = error_of(http.load_model, "nope")
    assert e.status() == "500"
    # Triton 2.51 says exactly this; more detail after it is welcome.
    assert e.message().startswith("failed to load 'nope', failed to poll from model repository")
    e = error_of(grpc_.load_model, "nope")
    assert e.status() == "StatusCode.INTERNAL"
    assert e.message().startswith("failed to load 'nope', failed to poll from model repository")
    # Logged as Triton 2.51's repository manager logs it.
    assert "failed to poll model 'nope': model not found in any model repository." in server.log()


def test_unknown_startup_model_is_logged_as_triton_logs_it(make_repo, start_server):
    repo = make_repo(["add_sub"])
    server = start_server(repo, "--model-control-mode=explicit", "--load-model=nope", wait=False)
    code = server.wait_exit(20)
    assert code is not None and code != 0, server.log()
    assert "failed to poll model 'nope': model not found in any model repository." in server.log()
    # An empty name is not the repository folder (Triton tries it as a model).
    server = start_server(repo, "--model-control-mode=explicit", "--load-model=", wait=False)
    code = server.wait_exit(20)
    assert code is not None and code != 0, server.log()
    assert "Invalid model name: a model name cannot be empty" in server.log()


def mentions_position(message, line, column=False):
    """The message gives `line` (and a column when asked): `config.pbtxt:4:1`,
    `4:12`, or `line 4, column 1` styles."""
    if column:
        pattern = rf"(\b{line}:\d+\b|line {line}\D+column \d+|line {line}, col \d+)"
    else:
        pattern = rf"(\b{line}:\d+\b|line {line}\b)"
    return re.search(pattern, message) is not None


def test_load_config_syntax_error(explicit, error_of):
    # Triton 2.51: 500 "failed to load 'broken_syntax', failed to poll from model
    # repository" and the parse position only in its log. Nereid puts the file
    # and the line in the message itself.
    server, http, grpc_ = explicit
    for client, status in ((http, "500"), (grpc_, "StatusCode.INTERNAL")):
        e = error_of(client.load_model, "broken_syntax")
        assert e.status() == status
        msg = e.message()
        assert msg.startswith("failed to load 'broken_syntax'"), msg
        assert "config.pbtxt" in msg, msg
        assert mentions_position(msg, 3), msg
    # The other models are unaffected.
    http.load_model("add_sub")
    infer_add_sub(httpclient, http)


def test_load_config_unknown_field(explicit, error_of):
    server, http, grpc_ = explicit
    for client, status in ((http, "500"), (grpc_, "StatusCode.INTERNAL")):
        e = error_of(client.load_model, "broken_field")
        assert e.status() == status
        msg = e.message()
        assert msg.startswith("failed to load 'broken_field'"), msg
        assert "config.pbtxt" in msg, msg
        assert "bogus_field" in msg, msg
        assert mentions_position(msg, 4, column=True), msg


def test_load_failure_reported_in_index(explicit, error_of):
    server, http, grpc_ = explicit
    e = error_of(http.load_model, "add_sub_gpu")
    assert e.status() == "400"
    # Triton 2.51: "load failed for model 'add_sub_gpu': version 1 is at UNAVAILABLE
    # state: Invalid argument: instance group add_sub_gpu_0 of model add_sub_gpu
    # has kind KIND_GPU but no GPUs are available;\n"
    assert e.message().startswith("load failed for model 'add_sub_gpu': version 1 is at UNAVAILABLE state: ")
    assert "KIND_GPU" in e.message()
    e = error_of(grpc_.load_model, "add_sub_gpu")
    assert e.status() == "StatusCode.INVALID_ARGUMENT"
    got = entry(server, "add_sub_gpu")
    assert {k: got[k] for k in ("name", "version", "state")} == {
        "name": "add_sub_gpu",
        "version": "1",
        "state": "UNAVAILABLE",
    }
    assert "KIND_GPU" in got["reason"]
    assert index(server, ready=True) == []


# --- model control mode NONE: everything loads at startup ---------------------

CORRUPT_ONNX = b"this is not an onnx model"


@pytest.fixture
def broken_repo(make_repo):
    repo = make_repo(["add_sub"], {"broken_syntax": BROKEN_SYNTAX})
    add_corrupt(repo)
    return repo


def add_corrupt(repo):
    """Adds `corrupt` to `repo`: add_sub's config over a model file that is not ONNX, so
    its version fails to load."""
    os.makedirs(os.path.join(repo, "corrupt", "1"))
    with open(os.path.join(EXAMPLE_MODELS, "add_sub", "config.pbtxt")) as src:
        config = src.read().replace('name: "add_sub"', 'name: "corrupt"')
    with open(os.path.join(repo, "corrupt", "config.pbtxt"), "w") as f:
        f.write(config)
    with open(os.path.join(repo, "corrupt", "1", "model.onnx"), "wb") as f:
        f.write(CORRUPT_ONNX)


def test_none_mode_broken_models_unavailable_others_serve(broken_repo, start_server):
    # Triton exits when a model fails to load unless --exit-on-error=false.
    server = start_server(broken_repo, "--exit-on-error=false")
    http = server.http_client()
    try:
        assert http.is_server_live()
        infer_add_sub(httpclient, http)
        entries = {e["name"]: e for e in index(server)}
        assert sorted(entries) == ["add_sub", "broken_syntax", "corrupt"]
        assert entries["add_sub"] == {"name": "add_sub", "version": "1", "state": "READY"}
        # Same as Triton: a model whose load failed is UNAVAILABLE with a reason.
        assert entries["corrupt"]["version"] == "1"
        assert entries["corrupt"]["state"] == "UNAVAILABLE"
        assert entries["corrupt"]["reason"]
        # Deliberate difference: Triton 2.51 lists a model whose config.pbtxt does
        # not parse by name only ({"name": "broken_syntax"}); Nereid says why.
        assert entries["broken_syntax"]["state"] == "UNAVAILABLE"
        assert "config.pbtxt" in entries["broken_syntax"]["reason"]
        assert not http.is_model_ready("corrupt")
        assert not http.is_model_ready("broken_syntax")
        assert index(server, ready=True) == [{"name": "add_sub", "version": "1", "state": "READY"}]
    finally:
        http.close()


def test_none_mode_broken_model_fails_startup_by_default(broken_repo, start_server):
    # --exit-on-error defaults to true: Triton 2.51 logs the failures and exits
    # with "error: creating server: Internal - failed to load all models", code 1.
    server = start_server(broken_repo, wait=False)
    code = server.wait_exit(20)
    assert code is not None and code != 0, server.log()
    assert "broken_syntax" in server.log()


def test_none_mode_refuses_load_and_unload(make_repo, start_server, error_of):
    # Model control mode NONE (the default): load/unload are UNAVAILABLE (503).
    # Triton's wording mentions polling even in NONE mode.
    server = start_server(make_repo(["add_sub"]))
    http, grpc_ = server.http_client(), server.grpc_client()
    try:
        for client, status in ((http, "503"), (grpc_, "StatusCode.UNAVAILABLE")):
            for call in (client.load_model, client.unload_model):
                e = error_of(call, "add_sub")
                assert (e.status(), e.message()) == (
                    status,
                    "explicit model load / unload is not allowed if polling is enabled",
                )
        infer_add_sub(httpclient, http)
        infer_add_sub(grpcclient, grpc_)
    finally:
        http.close()
        grpc_.close()


def test_poll_mode_loads_new_and_unloads_removed_models(make_repo, start_server, poll):
    # --model-control-mode=poll: the repository is re-scanned every
    # --repository-poll-secs; a model that appears is loaded, one that disappears is
    # unloaded, and the others keep serving throughout.
    repo = make_repo(["add_sub"])
    server = start_server(repo, "--model-control-mode=poll", "--repository-poll-secs=1")
    http = server.http_client()
    try:
        assert http.is_model_ready("add_sub")
        assert not http.is_model_ready("identity_fp32")
        shutil.copytree(os.path.join(EXAMPLE_MODELS, "identity_fp32"), os.path.join(repo, "identity_fp32"))
        poll(lambda: http.is_model_ready("identity_fp32"), timeout=15, what="identity_fp32 to load")
        shutil.rmtree(os.path.join(repo, "add_sub"))
        poll(lambda: not http.is_model_ready("add_sub"), timeout=15, what="add_sub to unload")
        assert http.is_model_ready("identity_fp32")
    finally:
        http.close()


def broken_add_sub(repo):
    """Replaces add_sub's config with one that no longer parses."""
    with open(os.path.join(repo, "add_sub", "config.pbtxt"), "w") as f:
        f.write(BROKEN_SYNTAX.replace("broken_syntax", "add_sub"))


def test_failed_reload_keeps_the_loaded_version_serving(make_repo, start_server, error_of):
    # Triton's rule (model_management.md): if a reload fails for any reason, the
    # already-loaded model is unchanged and remains loaded. The load still answers the
    # failure.
    repo = make_repo(["add_sub"])
    server = start_server(repo, "--model-control-mode", "explicit", "--load-model", "add_sub")
    http, grpc_ = server.http_client(), server.grpc_client()
    try:
        infer_add_sub(httpclient, http)
        broken_add_sub(repo)
        for client, status in ((http, "500"), (grpc_, "StatusCode.INTERNAL")):
            e = error_of(client.load_model, "add_sub")
            assert e.status() == status, e.status()
            assert e.message().startswith("failed to load 'add_sub', failed to poll from model repository"), e.message()
        infer_add_sub(httpclient, http)
        infer_add_sub(grpcclient, grpc_)
        assert http.is_model_ready("add_sub") and http.is_server_ready()
        assert entry(server, "add_sub") == {"name": "add_sub", "version": "1", "state": "READY"}
    finally:
        http.close()
        grpc_.close()


def test_poll_keeps_serving_through_a_broken_config_edit(make_repo, start_server):
    repo = make_repo(["add_sub"])
    server = start_server(repo, "--model-control-mode=poll", "--repository-poll-secs=1")
    http = server.http_client()
    try:
        infer_add_sub(httpclient, http)
        broken_add_sub(repo)
        # Two poll cycles see the broken edit; the model answers throughout.
        for _ in range(5):
            time.sleep(0.5)
            infer_add_sub(httpclient, http)
        assert http.is_model_ready("add_sub")
    finally:
        http.close()
