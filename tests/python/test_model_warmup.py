"""`model_warmup` through the binary, on Triton's own python backend (the nvidia-pytriton
0.7.0 wheel, as test_python_backend.py loads it), driven with tritonclient.

The model counts its executions per instance and logs every input it sees. The
expectations were taken from Triton 2.51 (triton-anchor.sh) with the same folder: with
two instances, a sample of batch size 2 run twice and a one-row sample read from
`warmup/in.bin`, each instance executes three times before the model is READY, the
statistics and metrics count those 10 inferences in 6 executions, and a sample whose
responses fail makes the load fail with "failed to run warmup sample '<name>': <error>; ".
"""

import json
import os
import struct

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from triton_wheel import python_backend_directory, stub_environment

pytestmark = pytest.mark.timeout(600)

MODEL_PY = '''
import json
import os
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.executions = 0
        self.log = os.path.join(args["model_repository"], "seen.log")

    def execute(self, requests):
        self.executions += 1
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            with open(self.log, "a") as f:
                f.write(json.dumps({"batch": len(requests), "in": x.tolist()}) + "\\n")
            if FAIL:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("kaput")))
                continue
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", x),
                pb_utils.Tensor("COUNT", np.array([[self.executions]], dtype=np.int64)),
            ]))
        return responses
'''

CONFIG = '''backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] }, { name: "COUNT" data_type: TYPE_INT64 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
model_warmup [
  { name: "zeros" batch_size: 2 count: 2
    inputs { key: "IN" value { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } } },
  { name: "file" batch_size: 1
    inputs { key: "IN" value { data_type: TYPE_FP32 dims: [ 2 ] input_data_file: "in.bin" } } }
]
'''


def write_model(root, name, fail=False):
    model = root / name
    (model / "1").mkdir(parents=True)
    (model / "warmup").mkdir()
    (model / "config.pbtxt").write_text(CONFIG)
    (model / "1" / "model.py").write_text(MODEL_PY.replace("FAIL", str(fail)))
    (model / "warmup" / "in.bin").write_bytes(struct.pack("<2f", 1.5, 2.5))
    return model


@pytest.fixture(scope="module")
def backends():
    return python_backend_directory(), stub_environment()


def seen(model):
    with open(model / "seen.log") as f:
        return [json.loads(line) for line in f]


def test_every_instance_is_warmed_before_ready_and_counted_as_triton_counts(backends, tmp_path, start_server):
    directory, env = backends
    model = write_model(tmp_path, "counter")
    srv = start_server(str(tmp_path), "--backend-directory", directory, env=env)
    client = srv.http_client()
    # Before any client request: each instance ran "zeros" twice (two rows) and "file" once.
    rows = seen(model)
    assert sorted((r["batch"], r["in"]) for r in rows) == sorted(
        [(2, [[0.0, 0.0]])] * 8 + [(1, [[1.5, 2.5]])] * 2), rows
    stats = client.get_inference_statistics("counter")["model_stats"][0]
    assert (stats["inference_count"], stats["execution_count"]) == (10, 6)
    assert stats["inference_stats"]["success"]["count"] == 10
    batches = {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}
    assert batches == {1: 2, 2: 4}
    metrics = srv.metrics()
    assert 'nv_inference_count{model="counter",version="1"} 10' in metrics
    assert 'nv_inference_exec_count{model="counter",version="1"} 6' in metrics
    # The first client request lands on a warmed instance: its fourth execution.
    request = httpclient.InferInput("IN", [1, 2], "FP32")
    request.set_data_from_numpy(np.array([[3, 4]], np.float32))
    result = client.infer("counter", [request])
    assert result.as_numpy("COUNT")[0][0] == 4
    assert np.array_equal(result.as_numpy("OUT"), np.array([[3, 4]], np.float32))


def test_a_failing_sample_fails_the_load_naming_it(backends, tmp_path, start_server):
    directory, env = backends
    write_model(tmp_path, "bad", fail=True)
    srv = start_server(str(tmp_path), "--backend-directory", directory, "--model-control-mode=explicit", env=env)
    client = srv.http_client()
    with pytest.raises(InferenceServerException) as failed:
        client.load_model("bad")
    assert "failed to run warmup sample 'zeros': kaput; kaput; " in str(failed.value)
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["bad"]["state"] == "UNAVAILABLE"
    assert "failed to run warmup sample 'zeros': kaput; kaput; " in index["bad"]["reason"]
    assert not client.is_model_ready("bad")
    assert client.is_server_live()
