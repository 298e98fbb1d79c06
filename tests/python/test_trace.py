"""The trace extension, `triton` mode: settings over HTTP and gRPC with tritonclient
(value shapes as Triton 2.51 answers them: strings, `trace_level` a list), sampled
inferences written to Triton's JSON trace files, per-model overrides, TENSORS records,
ensembles nesting their steps under `parent_id`, and bad settings refused while serving
goes on. Expected answers and messages were measured on Triton 2.51."""

import glob
import json
import os
import signal

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import add_sub_inputs, expect_error, wait_for

CORE = [
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
]
HTTP_ORDER = (
    ["HTTP_RECV_START", "HTTP_RECV_END"]
    + CORE
    + ["INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"]
)
GRPC_ORDER = (
    ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END"]
    + CORE
    + ["INFER_RESPONSE_COMPLETE", "GRPC_SEND_START", "GRPC_SEND_END"]
)


@pytest.fixture
def traced(tmp_path, make_repo, start_server):
    """A server tracing every request (TIMESTAMPS, rate 1), each trace in its own
    `trace.json.<n>` (log-frequency 1); returns (server, trace file path)."""
    repo = make_repo(["add_sub", "identity_fp32", "identity_string", "ensemble_add_sub"])
    trace_file = str(tmp_path / "trace.json")
    srv = start_server(
        repo,
        "--trace-config",
        f"triton,file={trace_file}",
        "--trace-config",
        "level=TIMESTAMPS",
        "--trace-config",
        "rate=1",
        "--trace-config",
        "triton,log-frequency=1",
    )
    return srv, trace_file


def indexed_records(trace_file):
    """Every record of the indexed trace files, in file order."""
    files = glob.glob(trace_file + ".*")
    files.sort(key=lambda f: int(f.rsplit(".", 1)[1]))
    records = []
    for f in files:
        with open(f) as fh:
            records.extend(json.load(fh))
    return records


def traces(records):
    """Records grouped by trace id: {id: {"header": ..., "names": [...], "ns": [...],
    "tensors": [...]}} in order."""
    out = {}
    for r in records:
        t = out.setdefault(r["id"], {"header": None, "names": [], "ns": [], "tensors": []})
        if "model_name" in r:
            t["header"] = r
        elif "timestamps" in r:
            t["names"].append(r["timestamps"][0]["name"])
            t["ns"].append(r["timestamps"][0]["ns"])
        elif "activity" in r:
            t["tensors"].append(r)
    return out


def wait_traces(trace_file, count):
    return wait_for(
        lambda: (lambda t: t if len(t) >= count else None)(traces(indexed_records(trace_file))),
        what=f"{count} traces in {trace_file}.*",
    )


def infer_add_sub(client, module, request_id="", model="add_sub"):
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    b = np.ones((1, 4), dtype=np.float32)
    return client.infer(model, add_sub_inputs(module, a, b), request_id=request_id)


def test_settings_answer_as_triton(traced):
    srv, trace_file = traced
    expected = {
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": "1",
        "trace_count": "-1",
        "log_frequency": "1",
        "trace_file": trace_file,
        "trace_mode": "triton",
    }
    assert srv.http_client().get_trace_settings() == expected
    assert srv.http_client().get_trace_settings(model_name="add_sub") == expected
    grpc = srv.grpc_client().get_trace_settings(as_json=True)["settings"]
    assert {k: v["value"] for k, v in grpc.items()} == {
        k: v if isinstance(v, list) else [v] for k, v in expected.items()
    }
    assert "trace" in srv.http_client().get_server_metadata()["extensions"]


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_each_request_has_the_full_ordered_timestamp_set(traced, proto):
    srv, trace_file = traced
    module = httpclient if proto == "http" else grpcclient
    client = srv.http_client() if proto == "http" else srv.grpc_client()
    for i in range(3):
        infer_add_sub(client, module, request_id=f"r{i}")
    found = wait_traces(trace_file, 3)
    order = HTTP_ORDER if proto == "http" else GRPC_ORDER
    seen_ids = set()
    for trace_id, t in found.items():
        assert t["header"]["model_name"] == "add_sub"
        assert t["header"]["model_version"] == 1
        seen_ids.add(t["header"]["request_id"])
        assert "parent_id" not in t["header"]
        assert t["names"] == order, t
        assert t["ns"] == sorted(t["ns"]), t
    assert seen_ids == {"r0", "r1", "r2"}


def test_rate_and_count_are_honoured(traced):
    srv, trace_file = traced
    client = srv.http_client()
    updated = client.update_trace_settings(settings={"trace_rate": "3", "trace_count": "2"})
    assert (updated["trace_rate"], updated["trace_count"]) == ("3", "2")
    for _ in range(12):
        infer_add_sub(client, httpclient)
    # Requests 3 and 6 of 12 are traced, then the count is spent.
    found = wait_traces(trace_file, 2)
    assert len(found) == 2
    assert client.get_trace_settings()["trace_count"] == "0"
    # A new count over gRPC starts again.
    grpc = srv.grpc_client()
    grpc.update_trace_settings(settings={"trace_count": "1", "trace_rate": "1"})
    infer_add_sub(client, httpclient)
    assert len(wait_traces(trace_file, 3)) == 3


def test_model_setting_overrides_and_falls_back(traced):
    srv, trace_file = traced
    client = srv.http_client()
    grpc = srv.grpc_client()
    off = client.update_trace_settings(settings={"trace_level": ["OFF"]})
    assert off["trace_level"] == ["OFF"]
    model = grpc.update_trace_settings(
        model_name="add_sub", settings={"trace_level": ["TIMESTAMPS"]}, as_json=True
    )["settings"]
    assert model["trace_level"]["value"] == ["TIMESTAMPS"]
    assert client.get_trace_settings()["trace_level"] == ["OFF"]
    # A model override's unset keys follow the global setting.
    client.update_trace_settings(settings={"trace_rate": "2"})
    assert client.get_trace_settings(model_name="add_sub")["trace_rate"] == "2"
    client.update_trace_settings(settings={"trace_rate": "1"})
    a = np.ones((1, 4), dtype=np.float32)
    identity = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    identity.set_data_from_numpy(a)
    client.infer("identity_fp32", [identity])
    infer_add_sub(client, httpclient, request_id="only")
    found = wait_traces(trace_file, 1)
    assert [t["header"]["model_name"] for t in found.values()] == ["add_sub"]
    # null clears the model's level: it falls back to the global OFF.
    cleared = client.update_trace_settings(model_name="add_sub", settings={"trace_level": None})
    assert cleared["trace_level"] == ["OFF"]
    infer_add_sub(client, httpclient)
    assert len(traces(indexed_records(trace_file))) == 1


def test_tensors_level_records_the_data(traced):
    srv, trace_file = traced
    client = srv.http_client()
    client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS", "TENSORS"]})
    assert client.get_trace_settings()["trace_level"] == ["TIMESTAMPS", "TENSORS"]
    infer_add_sub(client, httpclient, request_id="t")
    (t,) = wait_traces(trace_file, 1).values()
    by_activity = {}
    for r in t["tensors"]:
        by_activity.setdefault(r["activity"], {})[r["tensor"]["name"]] = r["tensor"]
    assert by_activity["TENSOR_QUEUE_INPUT"]["INPUT0"] == {
        "name": "INPUT0",
        "data": "0,1,2,3",
        "shape": "1,4",
        "dtype": "FP32",
    }
    assert by_activity["TENSOR_BACKEND_INPUT"]["INPUT1"]["data"] == "1,1,1,1"
    assert by_activity["TENSOR_BACKEND_OUTPUT"]["OUTPUT0"]["data"] == "1,2,3,4"
    assert by_activity["TENSOR_BACKEND_OUTPUT"]["OUTPUT1"]["data"] == "-1,0,1,2"
    assert t["names"] == HTTP_ORDER
    # Strings are quoted, as Triton's tracer writes them.
    strings = httpclient.InferInput("INPUT0", [1, 2], "BYTES")
    strings.set_data_from_numpy(np.array([[b"ab", b"c"]], dtype=np.object_))
    client.infer("identity_string", [strings])
    found = wait_traces(trace_file, 2)
    last = [t for t in found.values() if t["header"]["model_name"] == "identity_string"][0]
    assert last["tensors"][0]["tensor"]["data"] == '"ab","c"'


def test_ensemble_steps_nest_under_the_parent(traced):
    srv, trace_file = traced
    infer_add_sub(srv.grpc_client(), grpcclient, request_id="e", model="ensemble_add_sub")
    found = wait_traces(trace_file, 3)
    parents = [t for t in found.values() if t["header"]["model_name"] == "ensemble_add_sub"]
    steps = [t for t in found.values() if t["header"]["model_name"] == "add_sub"]
    assert len(parents) == 1 and len(steps) == 2
    parent_id = parents[0]["header"]["id"]
    assert all(s["header"]["parent_id"] == parent_id for s in steps)
    assert all(s["names"] == CORE for s in steps)
    assert parents[0]["names"][0] == "GRPC_WAITREAD_START"


def test_tensors_level_records_an_ensembles_own_inputs_and_outputs(traced):
    # Triton's ensemble scheduler records the request's inputs when it is queued and
    # the response its outputs when sent, besides each step's (L0_cmdline_trace).
    srv, trace_file = traced
    client = srv.http_client()
    client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS", "TENSORS"]})
    infer_add_sub(client, httpclient, request_id="e", model="ensemble_add_sub")
    found = wait_traces(trace_file, 3)
    (parent,) = [t for t in found.values() if t["header"]["model_name"] == "ensemble_add_sub"]
    recorded = sorted((r["activity"], r["tensor"]["name"]) for r in parent["tensors"])
    assert recorded == [
        ("TENSOR_BACKEND_OUTPUT", "OUTPUT0"),
        ("TENSOR_BACKEND_OUTPUT", "OUTPUT1"),
        ("TENSOR_QUEUE_INPUT", "INPUT0"),
        ("TENSOR_QUEUE_INPUT", "INPUT1"),
    ]


def test_bad_settings_are_refused_and_serving_continues(traced):
    srv, _ = traced
    cases = [
        ({"trace_rate": "abc"}, "Unable to parse 'trace_rate', got: abc"),
        ({"trace_rate": "0"}, "Attempting to set invalid trace setting :sample rate must be non-zero"),
        ({"trace_rate": "-1"}, "value is out of range [ 0, 4294967295 ], got: -1"),
        ({"trace_count": "-2"}, "Unable to parse 'trace_count'. Expecting value >= -1, got:-2"),
        ({"trace_level": ["LOUD"]}, "Unable to parse 'trace_level', got: LOUD"),
        ({"trace_level": ["OFF", "TIMESTAMPS"]}, "Expect only one trace level 'OFF' is specified"),
        ({"colour": "red"}, "unknown trace setting 'colour'"),
        ({"log_frequency": "x"}, "Unable to parse 'log_frequency', got: x"),
    ]
    for settings, message in cases:
        err = expect_error(srv.http_client().update_trace_settings, settings=settings)
        assert message in err.message(), (settings, err.message())
        err = expect_error(srv.grpc_client().update_trace_settings, settings=settings)
        assert err.status() == "StatusCode.INVALID_ARGUMENT", (settings, err)
        assert message in err.message(), (settings, err.message())
    # Wrong JSON types: 400 with the setting named.
    for body in ({"trace_rate": 5}, {"trace_level": "TIMESTAMPS"}, {"trace_level": [1]}, [1]):
        resp = srv.request("POST", "/v2/trace/setting", body)
        assert resp.status == 400, (body, resp)
    resp = srv.request("POST", "/v2/trace/setting", {"trace_file": "/tmp/elsewhere.json"})
    assert resp.status == 501
    assert resp.json()["error"] == "trace file location can not be updated through network protocol"
    resp = srv.request("GET", "/v2/models/nosuch/trace/setting")
    assert (resp.status, resp.json()["error"]) == (400, "Request for unknown model : nosuch")
    err = expect_error(srv.grpc_client().get_trace_settings, model_name="nosuch")
    assert "Request for unknown model : nosuch" in err.message()
    # Nothing changed, and inference still works.
    assert srv.http_client().get_trace_settings()["trace_rate"] == "1"
    result = infer_add_sub(srv.http_client(), httpclient)
    assert result.as_numpy("OUTPUT0").tolist() == [[1, 2, 3, 4]]


def test_without_log_frequency_the_file_is_written_at_shutdown(tmp_path, make_repo, start_server):
    repo = make_repo(["add_sub"])
    trace_file = str(tmp_path / "trace.json")
    srv = start_server(
        repo, "--trace-file", trace_file, "--trace-level", "TIMESTAMPS", "--trace-rate", "1"
    )
    for i in range(2):
        infer_add_sub(srv.http_client(), httpclient, request_id=f"s{i}")
    assert not os.path.exists(trace_file)
    srv.signal(signal.SIGTERM)
    assert srv.wait_exit(30) == 0, srv.log()
    with open(trace_file) as fh:
        found = traces(json.load(fh))
    assert sorted(t["header"]["request_id"] for t in found.values()) == ["s0", "s1"]


def test_a_trace_file_in_a_missing_folder_is_refused_at_start(tmp_path, make_repo, start_server):
    srv = start_server(
        make_repo(["add_sub"]),
        "--trace-config",
        f"triton,file={tmp_path}/missing/trace.json",
        "--trace-config",
        "level=TIMESTAMPS",
        wait=False,
    )
    assert srv.wait_exit(30) not in (None, 0)
    assert "does not exist" in srv.log()


def test_trace_routes_belong_to_the_trace_api_group(make_repo, start_server):
    srv = start_server(make_repo(["add_sub"]), "--http-restricted-api=trace:key=secret")
    for path in ("/v2/trace/setting", "/v2/models/add_sub/trace/setting"):
        resp = srv.request("GET", path)
        assert resp.status == 403, resp
        assert resp.json()["error"] == "This API is restricted, expecting header 'key'"
        resp = srv.request("GET", path, headers={"key": "secret"})
        assert resp.status == 200, resp
    # Inference is not in the group.
    infer_add_sub(srv.http_client(), httpclient)
