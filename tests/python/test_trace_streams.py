"""The trace extension (`triton` mode) on the requests test_trace.py does not cover: each
request of a gRPC `ModelStreamInfer` stream, a decoupled model's responses (gRPC stream,
HTTP generate and generate_stream), HTTP generate on an ordinary model, and response-cache
hits. Expected records were taken from the real Triton 2.51 (triton-anchor.sh, TIMESTAMPS
and TENSORS at rate 1, python-backend add_sub, add_sub with the response cache and
repeat_py):

- a stream request: GRPC_WAITREAD_START (when the stream began waiting for it),
  GRPC_WAITREAD_END, the core's records, INFER_RESPONSE_COMPLETE, GRPC_SEND_START/END;
- a decoupled request on a stream: INFER_RESPONSE_COMPLETE once (the first message, even
  a final flag alone), a GRPC_SEND_START/END pair per message written (the empty final
  response included when asked for), the core's records once, and at TENSORS a
  TENSOR_BACKEND_OUTPUT per response;
- generate: HTTP_RECV_*, the core's records, INFER_RESPONSE_COMPLETE per message of the
  model (a final flag alone included), HTTP_SEND_START/END per reply or event written
  (Triton writes 0 as their time; the real time is written here);
- a cache hit: REQUEST_START, QUEUE_START, REQUEST_END and nothing about the lookup; at
  TENSORS its inputs (TENSOR_QUEUE_INPUT) and the cached outputs (TENSOR_BACKEND_OUTPUT).

Timestamps are checked in the order Nereid writes them: the frontend's after the core's
for a request answered once (as test_trace.py), and, for a decoupled model whose core
records are written when its execution returns, as two ordered sequences.
"""

import json
import os
import queue
import shutil

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import REPO_ROOT, add_sub_config, wait_for
from test_trace import CORE, GRPC_ORDER, HTTP_ORDER, indexed_records, infer_add_sub, traces
from triton_wheel import python_backend_directory, stub_environment

CACHED = add_sub_config(name="add_sub_cache", extra="response_cache { enable: true }\n")
TRACE_ARGS = ("--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1",
              "--trace-config", "triton,log-frequency=1")
FRONTEND = {"GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "HTTP_RECV_START", "HTTP_RECV_END",
            "INFER_RESPONSE_COMPLETE", "GRPC_SEND_START", "GRPC_SEND_END", "HTTP_SEND_START",
            "HTTP_SEND_END"}


class Traced:
    """A server tracing every request into `trace.json.<n>`, with the trace ids already
    checked by earlier actions, so each action reads only the traces it made."""

    def __init__(self, srv, trace_file):
        self.srv = srv
        self.trace_file = trace_file
        self.seen = set()

    def new(self, count):
        """The next `count` traces written: {id: trace} (see test_trace.traces)."""
        def ready():
            found = {i: t for i, t in traces(indexed_records(self.trace_file)).items() if i not in self.seen}
            return found if len(found) >= count else None

        found = wait_for(ready, what=f"{count} new traces in {self.trace_file}.*")
        assert len(found) == count, found
        self.seen.update(found)
        return found

    def one(self):
        (trace,) = self.new(1).values()
        return trace

    def set_level(self, model, levels):
        body = json.dumps({"trace_level": levels}).encode()
        resp = self.srv.request("POST", f"/v2/models/{model}/trace/setting", body)
        assert resp.status == 200, resp.body


@pytest.fixture
def traced(tmp_path, make_repo, start_server):
    repo = make_repo(["add_sub"], {"add_sub_cache": CACHED})
    trace_file = str(tmp_path / "trace.json")
    srv = start_server(repo, "--cache-config", "local,size=1048576",
                       "--trace-config", f"triton,file={trace_file}", *TRACE_ARGS)
    return Traced(srv, trace_file)


@pytest.fixture(scope="module")
def traced_py(tmp_path_factory):
    """A server with Triton's python backend serving the decoupled repeat_py (IN = n
    sends OUT = 0 .. n-1, then the final flag alone); skipped without the wheel."""
    from conftest import Server, base_args

    directory, env = python_backend_directory(), stub_environment()
    root = tmp_path_factory.mktemp("trace_py")
    shutil.copytree(os.path.join(REPO_ROOT, "tests", "python_backend_models", "repeat_py"),
                    root / "models" / "repeat_py", ignore=shutil.ignore_patterns("__pycache__"))
    trace_file = str(root / "trace.json")
    prefix = f"nereid_trace_{os.getpid()}_"
    srv = Server(str(root / "models"), base_args(str(root / "models"), [
        "--backend-directory", directory, "--backend-config", f"python,shm-region-prefix-name={prefix}",
        "--trace-config", f"triton,file={trace_file}", *TRACE_ARGS]), env=env)
    try:
        srv.wait_started(timeout=120)
        yield Traced(srv, trace_file)
    finally:
        srv.kill()
        for name in os.listdir("/dev/shm"):
            if name.startswith(prefix):
                os.unlink(os.path.join("/dev/shm", name))


def assert_ordered(trace):
    assert trace["ns"] == sorted(trace["ns"]), trace


def split(trace):
    """(frontend records, core records) of a trace, each as (names, ns) in file order."""
    front = [(n, ns) for n, ns in zip(trace["names"], trace["ns"]) if n in FRONTEND]
    core = [(n, ns) for n, ns in zip(trace["names"], trace["ns"]) if n not in FRONTEND]
    return front, core


def assert_decoupled(trace, frontend_names):
    """A decoupled request's trace: the frontend's records are `frontend_names`, the core's
    are each recorded once, each sequence in time order, and the first answer comes after
    the request started."""
    front, core = split(trace)
    assert [n for n, _ in front] == frontend_names, trace
    assert [n for n, _ in core] == CORE, trace
    for part in (front, core):
        assert [ns for _, ns in part] == sorted(ns for _, ns in part), trace
    ns = dict(core)
    first_answer = trace["ns"][trace["names"].index("INFER_RESPONSE_COMPLETE")]
    assert front[1][1] <= ns["REQUEST_START"] <= first_answer, trace


def stream(client, requests):
    """Sends (model, inputs, kwargs) requests on one stream; returns the answers once
    `expected` (the sum of each request's kwargs.pop("answers", 1)) have come."""
    answers = queue.Queue()
    expected = 0
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for model, inputs, kwargs in requests:
            expected += kwargs.pop("answers", 1)
            client.async_stream_infer(model, inputs, **kwargs)
        got = [answers.get(timeout=20) for _ in range(expected)]
    finally:
        client.stop_stream()
    for result, error in got:
        assert error is None, error
    return [result for result, _ in got]


def add_sub_inputs(value=1.0):
    inputs = [grpcclient.InferInput("INPUT0", [1, 4], "FP32"), grpcclient.InferInput("INPUT1", [1, 4], "FP32")]
    inputs[0].set_data_from_numpy(np.full((1, 4), value, np.float32))
    inputs[1].set_data_from_numpy(np.ones((1, 4), np.float32))
    return inputs


def repeat_input(n):
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([n], np.int32))
    return [tensor]


def post(srv, path, body):
    resp = srv.request("POST", path, json.dumps(body).encode())
    assert resp.status == 200, resp.body
    return resp.body.decode()


def test_each_stream_request_has_the_full_ordered_set(traced):
    client = traced.srv.grpc_client()
    stream(client, [("add_sub", add_sub_inputs(i), {"request_id": f"s{i}"}) for i in range(3)])
    found = traced.new(3)
    by_request = {t["header"]["request_id"]: t for t in found.values()}
    assert sorted(by_request) == ["s0", "s1", "s2"]
    for trace in by_request.values():
        assert trace["header"]["model_name"] == "add_sub"
        assert trace["names"] == GRPC_ORDER, trace
        assert_ordered(trace)
    # Each read waits from when the stream was ready for the next message: not before the
    # previous request was read.
    waits = [dict(zip(by_request[r]["names"], by_request[r]["ns"])) for r in ("s0", "s1", "s2")]
    for before, after in zip(waits, waits[1:]):
        assert before["GRPC_WAITREAD_END"] <= after["GRPC_WAITREAD_START"] <= after["GRPC_WAITREAD_END"]


def test_a_request_refused_in_the_stream_leaves_no_trace_and_the_next_is_traced(traced):
    client = traced.srv.grpc_client()
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer("missing_model", add_sub_inputs(), request_id="bad")
        client.async_stream_infer("add_sub", add_sub_inputs(), request_id="good")
        got = [answers.get(timeout=20) for _ in range(2)]
    finally:
        client.stop_stream()
    assert [error is None for _, error in got] == [False, True]
    trace = traced.one()
    assert trace["header"]["request_id"] == "good"
    assert trace["names"] == GRPC_ORDER


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_a_cache_hit_records_its_queueing_and_no_compute(traced, proto):
    module = httpclient if proto == "http" else grpcclient
    client = traced.srv.http_client() if proto == "http" else traced.srv.grpc_client()
    infer_add_sub(client, module, request_id="miss", model="add_sub_cache")
    miss = traced.one()
    # A miss queues once (before its lookup) and computes as any request.
    assert miss["names"] == (HTTP_ORDER if proto == "http" else GRPC_ORDER), miss
    infer_add_sub(client, module, request_id="hit", model="add_sub_cache")
    hit = traced.one()
    receive, send = (("HTTP_RECV_START", "HTTP_RECV_END"), ("HTTP_SEND_START", "HTTP_SEND_END")) \
        if proto == "http" else (("GRPC_WAITREAD_START", "GRPC_WAITREAD_END"), ("GRPC_SEND_START", "GRPC_SEND_END"))
    assert hit["header"]["request_id"] == "hit"
    assert hit["names"] == [*receive, "REQUEST_START", "QUEUE_START", "REQUEST_END",
                            "INFER_RESPONSE_COMPLETE", *send], hit
    assert_ordered(hit)


def test_a_cache_hit_records_its_inputs_and_the_cached_outputs(traced):
    traced.set_level("add_sub_cache", ["TIMESTAMPS", "TENSORS"])
    client = traced.srv.http_client()
    for request_id in ("miss", "hit"):
        infer_add_sub(client, httpclient, request_id=request_id, model="add_sub_cache")
        trace = traced.one()
    assert trace["header"]["request_id"] == "hit"
    # INPUT0 = 0 1 2 3 and INPUT1 = 1: OUTPUT0 is their sum, OUTPUT1 their difference.
    assert [(t["activity"], t["tensor"]["name"], t["tensor"]["data"]) for t in trace["tensors"]] == [
        ("TENSOR_QUEUE_INPUT", "INPUT0", "0,1,2,3"),
        ("TENSOR_QUEUE_INPUT", "INPUT1", "1,1,1,1"),
        ("TENSOR_BACKEND_OUTPUT", "OUTPUT0", "1,2,3,4"),
        ("TENSOR_BACKEND_OUTPUT", "OUTPUT1", "-1,0,1,2"),
    ]
    assert trace["names"].count("QUEUE_START") == 1


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
def test_generate_is_traced_as_infer(traced, route):
    text = post(traced.srv, f"/v2/models/add_sub/{route}", {"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1]})
    assert "OUTPUT0" in text
    trace = traced.one()
    assert trace["header"]["model_name"] == "add_sub"
    assert trace["names"] == HTTP_ORDER, trace
    assert_ordered(trace)


def test_generate_failing_validation_writes_no_core_records(traced):
    resp = traced.srv.request("POST", "/v2/models/add_sub/generate", json.dumps({"INPUT0": [1, 2, 3, 4]}).encode())
    assert resp.status == 400
    trace = traced.one()
    assert trace["names"] == ["HTTP_RECV_START", "HTTP_RECV_END"], trace


def send_pairs(count):
    return ["GRPC_SEND_START", "GRPC_SEND_END"] * count


@pytest.mark.parametrize("n, empty_final, written", [(3, False, 3), (3, True, 4), (0, False, 0)],
                         ids=["three", "three+empty-final", "none"])
def test_decoupled_stream_records_each_response(traced_py, n, empty_final, written):
    client = traced_py.srv.grpc_client()
    kwargs = {"request_id": f"d{n}", "enable_empty_final_response": empty_final, "answers": written}
    stream(client, [("repeat_py", repeat_input(n), kwargs)])
    trace = traced_py.one()
    assert trace["header"]["model_name"] == "repeat_py"
    assert trace["header"]["request_id"] == f"d{n}"
    # The first message (a response, or the final flag alone) completes the response once.
    assert_decoupled(trace, ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "INFER_RESPONSE_COMPLETE",
                             *send_pairs(written)])


def test_decoupled_responses_record_their_outputs(traced_py):
    traced_py.set_level("repeat_py", ["TIMESTAMPS", "TENSORS"])
    try:
        stream(traced_py.srv.grpc_client(), [("repeat_py", repeat_input(3), {"answers": 3})])
        trace = traced_py.one()
    finally:
        traced_py.set_level("repeat_py", None)
    tensors = [(t["activity"], t["tensor"]["name"], t["tensor"]["data"]) for t in trace["tensors"]]
    assert [t for t in tensors if t[0] == "TENSOR_QUEUE_INPUT"] == [("TENSOR_QUEUE_INPUT", "IN", "3")]
    assert [t for t in tensors if t[0] == "TENSOR_BACKEND_OUTPUT"] == [
        ("TENSOR_BACKEND_OUTPUT", "OUT", str(i)) for i in range(3)]


def test_decoupled_generate_stream_records_each_message(traced_py):
    text = post(traced_py.srv, "/v2/models/repeat_py/generate_stream", {"IN": [3]})
    assert text.count("data: ") == 3
    trace = traced_py.one()
    # Three responses, each completed and written, then the final flag alone: completed.
    sent = ["INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"] * 3
    assert_decoupled(trace, ["HTTP_RECV_START", "HTTP_RECV_END", *sent, "INFER_RESPONSE_COMPLETE"])


def test_decoupled_generate_records_both_messages_and_one_reply(traced_py):
    assert json.loads(post(traced_py.srv, "/v2/models/repeat_py/generate", {"IN": [1]}))["OUT"] == 0
    trace = traced_py.one()
    assert_decoupled(trace, ["HTTP_RECV_START", "HTTP_RECV_END", "INFER_RESPONSE_COMPLETE",
                             "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"])
