"""Iterative sequences (`sequence_batching { iterative_sequence: true }`) and request
rescheduling (issue 35, item 4), through the binary on Triton's own python backend (the
nvidia-pytriton 0.7.0 wheel, as test_python_backend.py loads it), driven with
tritonclient.

A request sent without a correlation ID becomes a sequence of its own; each time the
model releases it with `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE` it runs again in that
sequence, and when it completes the sequence ends. The countdown model answers a
request for N with N responses (N-1 ... 0) over N executions, keeping its place per
correlation ID; the non-decoupled model reschedules each request once before answering.
A model without `iterative_sequence` that asks for rescheduling gets Triton's error on
the release, and its request fails (Triton 2.51 leaves that client waiting forever).
The expectations were taken from Triton 2.51 (triton-anchor.sh) with the same folders;
Triton numbers the IDs it gives from 1, Nereid from the top of the range, away from the
IDs clients choose.
"""

import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import run_in_threads, wait_for
from triton_wheel import python_backend_directory, stub_environment

pytestmark = pytest.mark.timeout(600)

COUNTDOWN_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.left = {}
        self.executions = 0

    def execute(self, requests):
        self.executions += 1
        for request in requests:
            key = request.correlation_id()
            if key not in self.left:
                self.left[key] = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            self.left[key] -= 1
            left = self.left[key]
            response = pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([left], np.int32)),
                pb_utils.Tensor("ID", np.array([key], np.uint64)),
            ])
            sender = request.get_response_sender()
            if left <= 0:
                del self.left[key]
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(response)
        return None
'''

COUNTDOWN_CONFIG = '''backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "ID" data_type: TYPE_UINT64 dims: [ 1 ] } ]
sequence_batching { iterative_sequence: true }
instance_group [ { kind: KIND_CPU } ]
'''

ONCE_MORE_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.seen = set()

    def execute(self, requests):
        responses = []
        for request in requests:
            key = request.correlation_id()
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if key not in self.seen:
                self.seen.add(key)
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * 2)]))
        return responses
'''

ONCE_MORE_CONFIG = '''backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
SEQUENCE
instance_group [ { kind: KIND_CPU } ]
'''


def write_model(root, name, model_py, config):
    (root / name / "1").mkdir(parents=True)
    (root / name / "1" / "model.py").write_text(model_py)
    (root / name / "config.pbtxt").write_text(config)


@pytest.fixture(scope="module", params=["off", "execution_count"], ids=["unlimited", "rate_limited"])
def server(tmp_path_factory, request):
    """The models, served without and with the rate limiter (whose instance wrapper must
    hand rescheduled requests back as the backend's instance does)."""
    from conftest import Server, base_args

    directory, env = python_backend_directory(), stub_environment()
    root = tmp_path_factory.mktemp("iterative")
    write_model(root, "countdown", COUNTDOWN_PY, COUNTDOWN_CONFIG)
    write_model(root, "once_more", ONCE_MORE_PY,
                ONCE_MORE_CONFIG.replace("SEQUENCE", "sequence_batching { iterative_sequence: true }"))
    write_model(root, "not_iterative", ONCE_MORE_PY, ONCE_MORE_CONFIG.replace("SEQUENCE", ""))
    srv = Server(str(root), base_args(str(root), ["--backend-directory", directory,
                                                  f"--rate-limit={request.param}"]), env=env)
    try:
        srv.wait_started(timeout=120)
        yield srv
    finally:
        srv.kill()


def countdown(client, start, **sequence):
    """Streams one countdown request; returns its (OUT, ID) responses up to the final one."""
    responses = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        value = grpcclient.InferInput("IN", [1], "INT32")
        value.set_data_from_numpy(np.array([start], np.int32))
        client.async_stream_infer("countdown", [value], enable_empty_final_response=True, **sequence)
        got = []
        while True:
            result, error = responses.get(timeout=30)
            assert error is None, error
            final = result.get_response().parameters["triton_final_response"].bool_param
            if result.get_response().outputs:
                got.append((int(result.as_numpy("OUT")[0]), int(result.as_numpy("ID")[0])))
            if final:
                return got
    finally:
        client.stop_stream()


def test_a_request_without_an_id_runs_until_the_model_completes_it(server):
    client = server.grpc_client()
    got = countdown(client, 3)
    # Three executions of one request, one sequence: each response from its own iteration.
    assert [out for out, _ in got] == [2, 1, 0]
    assert len({key for _, key in got}) == 1
    # The server chose the ID; it is nonzero and not one of the small IDs clients use.
    assert got[0][1] > 1 << 32
    # The last execution is counted when it returns, which may be just after its final
    # response reached the client.
    http = server.http_client()
    executions = lambda: http.get_inference_statistics("countdown")["model_stats"][0]["execution_count"]  # noqa: E731
    wait_for(lambda: executions() == 3, timeout=5, what="the third execution to be counted")


def test_concurrent_iterative_requests_each_keep_their_own_sequence(server):
    results = {}

    def send(index):
        client = server.grpc_client()
        try:
            results[index] = countdown(client, 2 + index)
        finally:
            client.close()

    run_in_threads(send, 4)
    for index, got in results.items():
        assert [out for out, _ in got] == list(range(1 + index, -1, -1)), (index, got)
    keys = [got[0][1] for got in results.values()]
    assert len(set(keys)) == 4, keys


def test_a_client_given_id_is_kept(server):
    got = countdown(server.grpc_client(), 2, sequence_id=42, sequence_start=True)
    assert got == [(1, 42), (0, 42)]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_rescheduled_request_of_a_non_decoupled_model_gets_its_one_answer(server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    client = server.http_client() if protocol == "http" else server.grpc_client()
    x = np.arange(4, dtype=np.float32)
    value = module.InferInput("IN", [4], "FP32")
    value.set_data_from_numpy(x)
    result = client.infer("once_more", [value])
    np.testing.assert_array_equal(result.as_numpy("OUT"), x * 2)


def test_rescheduling_without_iterative_sequences_fails_the_request_not_the_server(server):
    client = server.http_client()
    value = httpclient.InferInput("IN", [4], "FP32")
    value.set_data_from_numpy(np.ones(4, np.float32))
    # The backend's release fails with Triton's error, which its log shows. Triton 2.51
    # then never answers the request (the client waits forever); Nereid fails it.
    with pytest.raises(InferenceServerException) as failed:
        client.infer("not_iterative", [value])
    assert "while the model is not configured to handle such a flag" in str(failed.value)
    # The instance is free: the next request of the same model is served (and, being the
    # model's second, answered).
    result = client.infer("not_iterative", [value])
    np.testing.assert_array_equal(result.as_numpy("OUT"), np.full(4, 2, np.float32))
