"""The `triton_grpc_error: true` stream header through the binary, with tritonclient as
python_backend's `lifecycle` QA uses it: the first request that fails in its model ends
the stream with the error's gRPC status (INTERNAL for a python model's TritonError), the
stream's other requests in flight are cancelled, and a request refused before it ran is
still answered in-stream. Without the header the error stays in-stream and the stream
goes on.
"""

import queue
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from test_cancellation import write_watching_model
from test_rate_limiter import backends  # noqa: F401  (the python backend fixture)

pytestmark = pytest.mark.timeout(300)

CHECKING_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if value[0] < 0:
                error = pb_utils.TritonError("negative input")
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return responses
'''


def write_checking_model(root):
    model = root / "checking"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('''backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
''')
    (model / "1" / "model.py").write_text(CHECKING_PY)


def tensor(value):
    t = grpcclient.InferInput("IN", [1], "FP32")
    t.set_data_from_numpy(np.array([value], np.float32))
    return t


@pytest.fixture
def server(backends, tmp_path, start_server):  # noqa: F811
    directory, env = backends
    marker = tmp_path / "marker"
    write_watching_model(tmp_path / "models", marker, decoupled=True)
    write_checking_model(tmp_path / "models")
    srv = start_server(str(tmp_path / "models"), "--backend-directory", directory, env=env)
    return srv, marker


def test_a_failed_request_ends_the_stream_with_its_status(server):
    srv, marker = server
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)),
                        headers={"triton_grpc_error": "true"})
    try:
        client.async_stream_infer("checking", [tensor(1)])
        result, error = answers.get(timeout=60)
        assert error is None and result.as_numpy("OUT")[0] == 1
        # Refused before it runs: answered in-stream, the stream goes on.
        client.async_stream_infer("no_such_model", [tensor(1)])
        result, error = answers.get(timeout=60)
        assert error is not None and error.status() is None, error
        assert "no_such_model" in error.message()
        client.async_stream_infer("watching", [tensor(1)])
        time.sleep(0.5)
        client.async_stream_infer("checking", [tensor(-1)])
        result, error = answers.get(timeout=60)
        assert result is None
        assert str(error.status()) == "StatusCode.INTERNAL", error
        assert error.message() == "negative input"
        # The decoupled request still running when the stream ended is cancelled.
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
        assert marker.read_text() == "cancelled"
        assert answers.empty(), "nothing after the status"
    finally:
        client.stop_stream()
    # The server goes on serving new streams.
    assert client.infer("checking", [tensor(2)]).as_numpy("OUT")[0] == 2


def test_without_the_header_errors_stay_in_the_stream(server):
    srv, _ = server
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for value in (-1, 3):
            client.async_stream_infer("checking", [tensor(value)])
        _, error = answers.get(timeout=60)
        assert error.status() is None and error.message() == "negative input"
        result, error = answers.get(timeout=60)
        assert error is None and result.as_numpy("OUT")[0] == 3
    finally:
        client.stop_stream()
