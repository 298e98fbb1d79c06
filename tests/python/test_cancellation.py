"""Requests whose client left are not executed (issue 38), through the binary: a slow
python model with one instance takes a queue of requests whose clients then go away —
HTTP connections closed, gRPC calls past their deadline, a gRPC stream cancelled. Only the request already
executing runs; the queued ones are ended without executing and counted as Triton counts
cancellation (`nv_inference_request_failure{reason="CANCELED"}`), and the model goes on
answering the next client.
"""

import socket
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from test_rate_limiter import backends  # noqa: F401  (the python backend fixture)

pytestmark = pytest.mark.timeout(300)

SLEEPS = 0.6

MODEL_PY = f'''
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({SLEEPS})
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
                for r in requests]
'''

SCHEDULERS = {"default": "", "dynamic": "dynamic_batching { max_queue_delay_microseconds: 0 }"}
CLIENTS = 5


def write_model(root, scheduler):
    model = root / "slow"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(f'''backend: "python"
max_batch_size: {1 if scheduler == "dynamic" else 0}
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{SCHEDULERS[scheduler]}
''')
    (model / "1" / "model.py").write_text(MODEL_PY)


def shape(scheduler):
    return [1, 1] if scheduler == "dynamic" else [1]


def http_request(host, port, scheduler):
    body = ('{"inputs":[{"name":"IN","shape":%s,"datatype":"FP32","data":[1]}]}' % shape(scheduler)).encode()
    return (f"POST /v2/models/slow/infer HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def leave_over_http(srv, scheduler):
    """Sends CLIENTS requests on their own connections, then closes them all unanswered."""
    host, port = srv.bound["http"]
    sockets = []
    for _ in range(CLIENTS):
        s = socket.create_connection((host, port))
        s.sendall(http_request(host, port, scheduler))
        sockets.append(s)
        time.sleep(0.02)
    time.sleep(0.15)
    for s in sockets:
        s.close()


def leave_over_grpc(srv, scheduler):
    """Sends CLIENTS calls whose deadline passes while they wait."""
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    assert client.is_model_ready("slow")  # the channel is connected before the clock starts
    tensor = grpcclient.InferInput("IN", shape(scheduler), "FP32")
    tensor.set_data_from_numpy(np.ones(shape(scheduler), np.float32))
    answers = []

    def call():
        try:
            client.infer("slow", [tensor], client_timeout=0.15)
            answers.append("answered")
        except InferenceServerException as e:
            answers.append(str(e))

    threads = [threading.Thread(target=call) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
        time.sleep(0.02)
    for t in threads:
        t.join()
    # The client's deadline passed: gRPC reports it as DEADLINE_EXCEEDED, or as CANCELLED
    # "Timeout expired" when it expires in the client before the call is under way.
    assert all("Deadline" in a or "Timeout expired" in a for a in answers), answers


def leave_over_grpc_stream(srv, scheduler):
    """Sends CLIENTS requests on one stream, then cancels the stream unanswered."""
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    tensor = grpcclient.InferInput("IN", shape(scheduler), "FP32")
    tensor.set_data_from_numpy(np.ones(shape(scheduler), np.float32))
    client.start_stream(callback=lambda result, error: None)
    for _ in range(CLIENTS):
        client.async_stream_infer("slow", [tensor])
    time.sleep(0.2)
    client.stop_stream(cancel_requests=True)


def canceled_count(srv):
    text = srv.metrics()
    for line in text.splitlines():
        if line.startswith("nv_inference_request_failure") and 'model="slow"' in line and 'reason="CANCELED"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


@pytest.mark.parametrize("scheduler", list(SCHEDULERS))
@pytest.mark.parametrize("leave", [leave_over_http, leave_over_grpc, leave_over_grpc_stream],
                         ids=["http", "grpc", "grpc_stream"])
def test_queued_requests_of_clients_that_left_are_not_executed(backends, tmp_path, start_server,  # noqa: F811
                                                               scheduler, leave):
    directory, env = backends
    write_model(tmp_path, scheduler)
    srv = start_server(str(tmp_path), "--backend-directory", directory, env=env)
    client = srv.http_client()
    leave(srv, scheduler)
    # The execution running when the clients left finishes; nothing queued starts.
    time.sleep(SLEEPS * 2.5)
    stats = client.get_inference_statistics("slow")["model_stats"][0]
    assert int(stats["execution_count"]) == 1, stats
    failed = int(stats["inference_stats"]["fail"]["count"])
    assert failed == canceled_count(srv), stats
    if leave is leave_over_http:
        assert failed == CLIENTS - 1, stats
    else:  # a gRPC call whose deadline passed in the client may never have reached the server
        assert 1 <= failed <= CLIENTS - 1, stats
    # The model goes on serving.
    tensor = httpclient.InferInput("IN", shape(scheduler), "FP32")
    tensor.set_data_from_numpy(np.full(shape(scheduler), 7, np.float32))
    assert client.infer("slow", [tensor]).as_numpy("OUT").flatten()[0] == 7


WATCHING_PY = '''
import json
import os
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.config = json.loads(args["model_config"])
        self.marker = self.config["parameters"]["MARKER"]["string_value"]

    def execute(self, requests):
        # Runs until the caller leaves (or 20 s), asking the server the way backends do
        # (TRITONBACKEND_RequestIsCancelled, or TRITONBACKEND_ResponseFactoryIsCancelled
        # through a decoupled model's response sender), then says what it saw in the
        # marker file.
        decoupled = pb_utils.using_decoupled_model_transaction_policy(self.config)
        watched = requests[0].get_response_sender() if decoupled else requests[0]
        end = time.time() + 20
        while time.time() < end and not watched.is_cancelled():
            time.sleep(0.05)
        seen = watched.is_cancelled()
        with open(self.marker, "w") as f:
            f.write("cancelled" if seen else "never")
        error = pb_utils.TritonError("cancelled", pb_utils.TritonError.CANCELLED)
        if decoupled:
            watched.send(pb_utils.InferenceResponse(error=error),
                         flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return None
        return [pb_utils.InferenceResponse(error=error) for _ in requests]
'''


def write_watching_model(root, marker, decoupled=False):
    model = root / "watching"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(f'''backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
parameters {{ key: "MARKER" value {{ string_value: "{marker}" }} }}
model_transaction_policy {{ decoupled: {"true" if decoupled else "false"} }}
''')
    (model / "1" / "model.py").write_text(WATCHING_PY)


@pytest.mark.parametrize("protocol", ["http", "grpc", "grpc_stream"])
def test_a_running_request_sees_its_caller_leave(backends, tmp_path, start_server,  # noqa: F811
                                                 protocol):
    """A hosted backend's TRITONBACKEND_RequestIsCancelled turns true while the request runs
    once its HTTP client closed the connection or its gRPC call passed its deadline, so a
    long-running model can stop early (Triton 2.51 answers false until the end); and a
    decoupled model's response sender says cancelled while it has sent nothing yet, once
    the client cancelled its gRPC stream (python_backend's `test_decoupled_execute_cancel`:
    before, Nereid noticed only when a response found nobody to write to)."""
    directory, env = backends
    marker = tmp_path / "marker"
    write_watching_model(tmp_path / "models", marker, decoupled=protocol == "grpc_stream")
    srv = start_server(str(tmp_path / "models"), "--backend-directory", directory, env=env)
    started = time.monotonic()
    if protocol == "http":
        host, port = srv.bound["http"]
        body = b'{"inputs":[{"name":"IN","shape":[1],"datatype":"FP32","data":[1]}]}'
        s = socket.create_connection((host, port))
        s.sendall((f"POST /v2/models/watching/infer HTTP/1.1\r\nHost: {host}:{port}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
        time.sleep(0.5)
        s.close()
    elif protocol == "grpc_stream":
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        tensor = grpcclient.InferInput("IN", [1], "FP32")
        tensor.set_data_from_numpy(np.ones([1], np.float32))
        client.start_stream(callback=lambda result, error: None)
        client.async_stream_infer("watching", [tensor])
        time.sleep(0.5)
        client.stop_stream(cancel_requests=True)
    else:
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        tensor = grpcclient.InferInput("IN", [1], "FP32")
        tensor.set_data_from_numpy(np.ones([1], np.float32))
        # Connect the channel first: a deadline that ends while the channel is still
        # connecting ("Timeout expired", seen under CI load) never reaches the server.
        assert client.is_model_ready("watching")
        with pytest.raises(InferenceServerException, match="Deadline"):
            client.infer("watching", [tensor], client_timeout=1.0)
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), "the model never finished"
    time.sleep(0.1)
    assert marker.read_text() == "cancelled"
    assert time.monotonic() - started < 5, "the model stopped soon after the caller left"


def test_a_sequence_whose_client_left_is_ended(backends, tmp_path, start_server):  # noqa: F811
    """The client of a sequence's request leaves while it runs: once it has run, the
    sequence ends as an idle release would end it (slot and state freed, a later request
    without START refused), not after the 60 s idle timeout."""
    directory, env = backends
    model = tmp_path / "seq"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('''backend: "python"
max_batch_size: 1
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
sequence_batching { max_sequence_idle_microseconds: 60000000 }
''')
    (model / "1" / "model.py").write_text(MODEL_PY)
    srv = start_server(str(tmp_path), "--backend-directory", directory, env=env)

    def active():
        for line in srv.metrics().splitlines():
            if line.startswith("nv_sequence_active") and 'model="seq"' in line:
                return int(float(line.rsplit(" ", 1)[1]))
        return None

    host, port = srv.bound["http"]
    body = ('{"parameters":{"sequence_id":5,"sequence_start":true},'
            '"inputs":[{"name":"IN","shape":[1,1],"datatype":"FP32","data":[1]}]}').encode()
    s = socket.create_connection((host, port))
    s.sendall((f"POST /v2/models/seq/infer HTTP/1.1\r\nHost: {host}:{port}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
    time.sleep(0.2)
    assert active() == 1
    s.close()
    time.sleep(SLEEPS + 0.6)
    assert active() == 0, "ended once its request ran"
    client = srv.http_client()
    tensor = httpclient.InferInput("IN", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.ones([1, 1], np.float32))
    with pytest.raises(InferenceServerException, match="START"):
        client.infer("seq", [tensor], sequence_id=5)
    # A new sequence under the same ID starts and runs.
    assert client.infer("seq", [tensor], sequence_id=5, sequence_start=True).as_numpy("OUT")[0][0] == 1


def sequence_metric(srv, family):
    for line in srv.metrics().splitlines():
        if line.startswith(family) and 'model="slow"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return None


def write_sequence_model(root, name, strategy, delay):
    model = root / name
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(f'''backend: "python"
max_batch_size: 1
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
sequence_batching {{ {strategy} max_sequence_idle_microseconds: 60000000 }}
''')
    (model / "1" / "model.py").write_text(MODEL_PY.replace(f"time.sleep({SLEEPS})", f"time.sleep({delay})"))


@pytest.mark.parametrize("where", ["queued_direct", "queued_oldest", "backlogged"])
def test_a_cancelled_sequence_request_cancels_its_sequence(backends, tmp_path, start_server,  # noqa: F811
                                                           poll, where):
    """As L0_request_cancellation's scheduler_test: while a sequence's START runs, two more
    of its requests queue (or, with the one slot taken, a second sequence's two wait in
    the backlog); the client cancels the first of the two. Both are answered CANCELLED
    (queued: once the START has run, when Triton's batcher looks too; backlogged: within
    a moment, not when the slot frees 60 s later), neither runs, both are counted with
    reason CANCELED, and the START still succeeds. Before, the cancelled request ran, and
    the one behind it too."""
    directory, env = backends
    strategy = "oldest { max_candidate_sequences: 1 }" if where == "queued_oldest" else "direct { }"
    write_sequence_model(tmp_path / "models", "slow", strategy, delay=2)
    srv = start_server(str(tmp_path / "models"), "--backend-directory", directory, env=env)
    client = grpcclient.InferenceServerClient(srv.grpc_url)

    def tensor():
        t = grpcclient.InferInput("IN", [1, 1], "FP32")
        t.set_data_from_numpy(np.ones([1, 1], np.float32))
        return t

    before = canceled_count(srv)
    started = {}
    runner = threading.Thread(target=lambda: started.setdefault(
        "out", client.infer("slow", [tensor()], sequence_id=1, sequence_start=True)))
    runner.start()
    # The START holds the slot (and runs) before the others are sent.
    poll(lambda: sequence_metric(srv, "nv_sequence_active") == 1, what="the START admitted")
    sequence = 2 if where == "backlogged" else 1
    answers = [{}, {}]
    futures = []
    for i in range(2):
        def callback(result, error, answer=answers[i]):
            answer["error"] = error
        futures.append(client.async_infer("slow", [tensor()], callback, sequence_id=sequence,
                                          sequence_start=where == "backlogged" and i == 0))
    time.sleep(0.5)
    assert answers == [{}, {}]
    futures[0].cancel()
    if where != "backlogged":
        runner.join()  # queued: answered once the START has run, as Triton's batcher does
    deadline = time.monotonic() + 2
    while not all(answers) and time.monotonic() < deadline:
        time.sleep(0.05)
    for answer in answers:
        assert answer.get("error") is not None and answer["error"].status() == "StatusCode.CANCELLED", answers
    runner.join()
    assert started["out"].as_numpy("OUT")[0][0] == 1, "the START ran"
    assert canceled_count(srv) == before + 2
    with pytest.raises(InferenceServerException, match="was cancelled"):
        client.infer("slow", [tensor()], sequence_id=sequence)
