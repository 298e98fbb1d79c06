"""A sequence streamed through an ensemble reaches a sequence model in order, through the
binary with tritonclient over gRPC streaming.

The ensemble's first step, a python-backend model with two instances, sleeps as many
milliseconds as its input says, so the sequence's START (300 ms) leaves it after the two
requests streamed behind it (1 ms each). The second step is the `sequence_accumulate`
example, which refuses a request of a sequence not started. Nereid submits each step of
a sequence's requests in the order they arrived. Triton (ensemble_scheduler.cc) submits a
step from the thread of the instance that answered the step before it, so here the
second request would reach the sequence model first and be refused as not started
(read from its code; Triton's CPU build here has no ONNX Runtime backend to show it).
"""

import os
import queue
import shutil

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from conftest import REPO_ROOT
from triton_wheel import python_backend_directory, stub_environment

pytestmark = pytest.mark.timeout(300)

DELAY_PY = '''
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            time.sleep(float(x.flat[0]) / 1000.0)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return out
'''

DELAY_CONFIG = '''backend: "python"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
'''

THROUGH = '''platform: "ensemble"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "delay" model_version: -1 input_map { key: "X" value: "IN" } output_map { key: "Y" value: "late" } },
  { model_name: "sequence_accumulate" model_version: -1 input_map { key: "INPUT" value: "late" }
    output_map { key: "OUTPUT" value: "SUM" } }
] }
'''


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from conftest import Server, base_args

    directory, env = python_backend_directory(), stub_environment()
    root = tmp_path_factory.mktemp("sequence_ensemble")
    shutil.copytree(os.path.join(REPO_ROOT, "examples", "models", "sequence_accumulate"),
                    root / "sequence_accumulate")
    for name, model_py, config in (("delay", DELAY_PY, DELAY_CONFIG), ("through", None, THROUGH)):
        (root / name / "1").mkdir(parents=True)
        if model_py:
            (root / name / "1" / "model.py").write_text(model_py)
        (root / name / "config.pbtxt").write_text(config)
    srv = Server(str(root), base_args(str(root), ["--backend-directory", directory]), env=env)
    try:
        srv.wait_started(timeout=120)
        yield srv
    finally:
        srv.kill()


def test_a_streamed_sequence_reaches_the_sequence_step_in_order(server):
    client = server.grpc_client()
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for value, start, end in ((300.0, True, False), (1.0, False, False), (1.0, False, True)):
            tensor = grpcclient.InferInput("IN", [1, 1], "FP32")
            tensor.set_data_from_numpy(np.array([[value]], np.float32))
            client.async_stream_infer("through", [tensor], sequence_id=11, sequence_start=start,
                                      sequence_end=end)
        sums = []
        for _ in range(3):
            result, error = answers.get(timeout=30)
            assert error is None, error
            sums.append(float(result.as_numpy("SUM")[0][0]))
    finally:
        client.stop_stream()
    assert sums == [300.0, 301.0, 302.0]
