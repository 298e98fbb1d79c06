"""The rate limiter through the binary (`--rate-limit=execution_count`,
`--rate-limit-resource`, `instance_group.rate_limiter`), on Triton's python backend:
two models that share a resource of count 1 never execute at once while a third model
without it does, as on Triton 2.51; a model asking for more of a resource than exists
fails its load with Triton's message and the others keep serving.
"""

import json
import os
import threading

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from triton_wheel import python_backend_directory, stub_environment

pytestmark = pytest.mark.timeout(600)

MODEL_PY = '''
import json
import os
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.log = os.path.join(args["model_repository"], "runs.log")

    def execute(self, requests):
        start = time.monotonic()
        time.sleep(0.15)
        with open(self.log, "a") as f:
            f.write(json.dumps([start, time.monotonic()]) + "\\n")
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
                for r in requests]
'''


def write_model(root, name, resources):
    model = root / name
    (model / "1").mkdir(parents=True)
    limiter = ""
    if resources:
        entries = ", ".join(f'{{ name: "{n}" count: {c} }}' for n, c in resources)
        limiter = f"rate_limiter {{ resources [ {entries} ] }}"
    (model / "config.pbtxt").write_text(f'''backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU {limiter} }} ]
''')
    (model / "1" / "model.py").write_text(MODEL_PY)
    return model


def runs(model):
    with open(model / "runs.log") as f:
        return [tuple(json.loads(line)) for line in f]


def overlap(a, b):
    return a[0] < b[1] and b[0] < a[1]


@pytest.fixture(scope="module")
def backends():
    return python_backend_directory(), stub_environment()


def test_models_sharing_a_resource_never_run_at_once(backends, tmp_path, start_server):
    directory, env = backends
    a = write_model(tmp_path, "a", [("R", 1)])
    b = write_model(tmp_path, "b", [("R", 1)])
    c = write_model(tmp_path, "c", [])
    srv = start_server(str(tmp_path), "--backend-directory", directory, "--rate-limit=execution_count",
                       "--rate-limit-resource=R:1", env=env)

    def send(model):
        client = httpclient.InferenceServerClient(srv.http_url)
        tensor = httpclient.InferInput("IN", [1], "FP32")
        tensor.set_data_from_numpy(np.array([1], np.float32))
        for _ in range(4):
            client.infer(model, [tensor])

    threads = [threading.Thread(target=send, args=(m,)) for m in ("a", "b", "c", "a", "b", "c")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    shared = runs(a) + runs(b)
    assert len(shared) == 16
    assert not any(overlap(x, y) for i, x in enumerate(shared) for y in shared[i + 1:]), shared
    assert any(overlap(x, y) for x in runs(c) for y in shared), "c runs beside the holders of R"


def test_more_of_a_resource_than_exists_fails_the_load(backends, tmp_path, start_server):
    directory, env = backends
    write_model(tmp_path, "greedy", [("R", 2)])
    write_model(tmp_path, "modest", [("R", 1)])
    srv = start_server(str(tmp_path), "--backend-directory", directory, "--rate-limit=execution_count",
                       "--rate-limit-resource=R:1", "--model-control-mode=explicit", "--load-model=modest",
                       env=env)
    client = srv.http_client()
    with pytest.raises(InferenceServerException) as failed:
        client.load_model("greedy")
    assert ('Resource count for "R" is limited to 1 which will prevent scheduling of one or more model '
            'instances, the minimum required count is 2') in str(failed.value)
    tensor = httpclient.InferInput("IN", [1], "FP32")
    tensor.set_data_from_numpy(np.array([2], np.float32))
    assert client.infer("modest", [tensor]).as_numpy("OUT")[0] == 2
