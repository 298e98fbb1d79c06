"""Triton's logging extension: `GET/POST /v2/logging` and gRPC `LogSettings`, changed
while the server runs and seen in its log, plus `--log-file`."""

import json
import os
import re

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from tritonclient.grpc import service_pb2, service_pb2_grpc

from conftest import base_args

DEFAULTS = {
    "log_file": "",
    "log_info": True,
    "log_warning": True,
    "log_error": True,
    "log_verbose_level": 0,
    "log_format": "default",
}
# Triton's lines: level letter, stamp, pid, file:line, then the message escaped in quotes.
ISO8601_LINE = re.compile(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ [IWE] \d+ [\w.]+:\d+\] "')
DEFAULT_LINE = re.compile(r'^[IWE]\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ [\w.]+:\d+\] "')


def grpc_settings(client, settings=None):
    """The settings as a plain dict, from gRPC's `{"settings": {name: {"x_param": v}}}`."""
    if settings is None:
        reply = client.get_log_settings(as_json=True)
    else:
        reply = client.update_log_settings(settings, as_json=True)
    return {name: next(iter(value.values())) for name, value in reply["settings"].items()}


@pytest.fixture
def explicit_server(make_repo, start_server):
    """A server of its own (settings are process-wide), loading nothing until asked."""
    return start_server(make_repo(["add_sub", "mlp"]), "--model-control-mode=explicit")


def test_settings_read_and_change_over_both_protocols(explicit_server):
    http = explicit_server.http_client()
    grpc = explicit_server.grpc_client()
    assert http.get_log_settings() == DEFAULTS
    assert grpc_settings(grpc) == DEFAULTS
    changed = http.update_log_settings({"log_verbose_level": 1, "log_warning": False})
    assert changed == {**DEFAULTS, "log_verbose_level": 1, "log_warning": False}
    # gRPC sees the HTTP change, and changes on top of it.
    assert grpc_settings(grpc, {"log_format": "ISO8601", "log_warning": True}) == {
        **DEFAULTS,
        "log_verbose_level": 1,
        "log_format": "ISO8601",
    }
    assert http.get_log_settings()["log_format"] == "ISO8601"
    # A null leaves a setting alone; an empty body changes nothing.
    resp = explicit_server.request("POST", "/v2/logging", {"log_info": None})
    assert (resp.status, resp.json()["log_info"]) == (200, True)
    assert explicit_server.request("POST", "/v2/logging", b"").json() == http.get_log_settings()
    metadata = http.get_server_metadata()
    assert "logging" in metadata["extensions"]


def loaded_lines(server, since):
    return [line for line in server.lines[since:] if "successfully loaded" in line]


def load_and_read_line(server, model, poll):
    """Loads `model` and waits for its "successfully loaded" line in the log."""
    mark = len(server.lines)
    server.http_client().load_model(model)
    return poll(lambda: loaded_lines(server, mark), what=f"the info line of loading {model}")[0]


def test_changes_take_effect_on_the_next_line(explicit_server, poll):
    server = explicit_server
    http = server.http_client()
    # Info off: loading a model logs nothing at info level (the unload that follows is
    # logged after it, so waiting for it is waiting for the reader too).
    http.update_log_settings({"log_info": False})
    mark = len(server.lines)
    http.load_model("add_sub")
    http.unload_model("add_sub")
    poll(lambda: not http.is_model_ready("add_sub"), what="add_sub unloaded")
    assert loaded_lines(server, mark) == []
    # Info on, ISO 8601 stamps: the next load's line has both.
    http.update_log_settings({"log_info": True, "log_format": "ISO8601"})
    line = load_and_read_line(server, "mlp", poll)
    assert ISO8601_LINE.match(line), line
    # And back to Triton's default stamp.
    http.update_log_settings({"log_format": "default"})
    line = load_and_read_line(server, "add_sub", poll)
    assert DEFAULT_LINE.match(line), line


@pytest.mark.parametrize(
    "body,message",
    [
        ({"log_info": 1}, "expect a boolean for 'log_info', got a non-negative integer"),
        ({"log_verbose_level": -1}, "expect a non-negative integer for 'log_verbose_level', got a negative number"),
        ({"log_verbose_level": True}, "expect a non-negative integer for 'log_verbose_level', got a boolean"),
        ({"log_format": "json"}, "invalid argument for log_format, got: json (expected default or ISO8601)"),
        ({"log_level": 2}, "unknown log setting 'log_level'"),
        # One bad setting applies none of the others (Triton applies those before it).
        ({"log_info": False, "log_format": 3}, "expect a string for 'log_format', got a non-negative integer"),
    ],
)
def test_bad_settings_are_refused_and_change_nothing(explicit_server, body, message):
    resp = explicit_server.request("POST", "/v2/logging", body)
    assert resp.status == 400, resp
    assert message in resp.json()["error"], resp
    assert explicit_server.http_client().get_log_settings() == DEFAULTS


def test_bad_settings_over_grpc(explicit_server):
    # tritonclient picks each setting's type from its name, so a wrong type needs the
    # raw stub.
    request = service_pb2.LogSettingsRequest()
    request.settings["log_info"].uint32_param = 1
    with grpc.insecure_channel(explicit_server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.LogSettings(request, timeout=20)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "expect a boolean for 'log_info', got a non-negative integer" in caught.value.details()
    assert grpc_settings(explicit_server.grpc_client()) == DEFAULTS


def test_log_file_cannot_change_over_the_network(explicit_server, error_of):
    # Triton's Unsupported error: HTTP 501, gRPC UNIMPLEMENTED.
    resp = explicit_server.request("POST", "/v2/logging", {"log_file": "/tmp/elsewhere.log"})
    assert resp.status == 501, resp
    assert resp.json()["error"] == "log file location can not be updated through network protocol"
    err = error_of(explicit_server.grpc_client().update_log_settings, {"log_file": "/tmp/x"})
    assert err.status() == "StatusCode.UNIMPLEMENTED", err
    # Posting back the settings as read is no change (Triton refuses any log_file).
    http = explicit_server.http_client()
    assert http.update_log_settings(http.get_log_settings()) == DEFAULTS


def test_restricted_logging_api(make_repo, start_server):
    server = start_server(make_repo(["add_sub"]), "--http-restricted-api=logging:admin-key=secret")
    resp = server.request("GET", "/v2/logging")
    assert resp.status == 403, resp
    assert server.request("GET", "/v2/logging", headers={"admin-key": "secret"}).status == 200


def test_log_file_receives_the_log(make_repo, start_server, tmp_path, poll):
    repo = make_repo(["add_sub"])
    log_file = str(tmp_path / "nereid.log")
    server = start_server(repo, "--log-file", log_file, wait=False)

    # The start-up lines go to the file, not stderr, so find the port there.
    def started():
        if not os.path.exists(log_file):
            return None
        with open(log_file) as f:
            found = re.search(r"Started HTTPService at [0-9.]+:(\d+)", f.read())
        return found and int(found.group(1))

    port = poll(started, what="the HTTP port in the log file")
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
    assert client.get_log_settings()["log_file"] == log_file
    client.close()
    assert not [line for line in server.lines if "Started HTTPService" in line]


def test_unwritable_log_file_stops_start_up(make_repo, start_server, tmp_path):
    repo = make_repo(["add_sub"])
    missing_dir = str(tmp_path / "no" / "such" / "dir" / "x.log")
    server = start_server(repo, raw_args=base_args(repo, ["--log-file", missing_dir]), wait=False)
    assert server.wait_exit(15) == 2
    assert f"failed to open log file '{missing_dir}'" in server.log()


def test_onnx_backend_logs_its_settings_as_tritons(make_repo, start_server, poll):
    # L0_backend_config reads the ONNX Runtime backend's verbose "backend configuration"
    # line: the global defaults under "cmdline", overridden or extended by
    # --backend-config settings for onnxruntime.
    server = start_server(make_repo(["add_sub"]), "--log-verbose=1",
                          "--backend-config=onnxruntime,min-compute-capability=XX",
                          "--backend-config=onnxruntime,a=0")
    poll(lambda: "backend configuration:" in server.log(), what="the settings line")
    line = next(li for li in server.log().splitlines() if "backend configuration:" in li)
    assert DEFAULT_LINE.match(line), line
    text = line.split('] "backend configuration:\\n')[1].rstrip('"').replace('\\"', '"')
    cmdline = json.loads(text)["cmdline"]
    assert cmdline["min-compute-capability"] == "XX"
    assert cmdline["a"] == "0"
    assert cmdline["default-max-batch-size"] == "4"
    assert cmdline["auto-complete-config"] == "true"
    assert len(cmdline) == 5, cmdline


@pytest.mark.parametrize("escaped", [True, False])
def test_verbose_lines_name_each_http_request_and_each_refusal(make_repo, start_server, poll, escaped):
    # Triton's verbose level 1 logs "HTTP request: <evhtp method> <path>" for each HTTP
    # request and "[request id: <id>] Infer failed: <message>" for a request refused when
    # issued; with TRITON_SERVER_ESCAPE_LOG_MESSAGES=0 the message goes out raw, so a
    # forged input name shows up as a record of its own (L0_logging's test_injection).
    env = None if escaped else {"TRITON_SERVER_ESCAPE_LOG_MESSAGES": "0"}
    server = start_server(make_repo(["identity_fp32"]), "--log-verbose=1", env=env)
    forged = 'I1129 10:00:00.000000 1 file.cc:1] "FORGED RECORD"'
    assert server.request("GET", "/v2/health/ready").status == 200
    body = {"id": "r7", "inputs": [{"name": f"\n{forged}\n{forged}", "shape": [1, 1], "datatype": "FP32", "data": [1]}]}
    assert server.request("POST", "/v2/models/identity_fp32/infer", body).status == 400
    body.pop("id")
    assert server.request("POST", "/v2/models/identity_fp32/infer", body).status == 400
    # gRPC's ModelInfer writes the same line.
    client = server.grpc_client()
    tensor = grpcclient.InferInput("NOPE", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.ones([1, 1], np.float32))
    with pytest.raises(InferenceServerException):
        client.infer("identity_fp32", [tensor], request_id="g9")
    client.close()
    poll(lambda: "[request id: g9] Infer failed" in server.log(), what="the refusals' lines")
    log = server.log()
    assert "HTTP request: 2 /v2/models/identity_fp32/infer" in log
    assert "HTTP request: 0 /v2/health/ready" in log
    assert "[request id: r7] Infer failed: " in log
    assert "[request id: <id_unknown>] Infer failed: " in log
    assert (forged in log.splitlines()) is not escaped, log
