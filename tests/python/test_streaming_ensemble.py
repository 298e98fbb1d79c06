"""Ensembles with a decoupled step (issue 35, item 5), through the binary on Triton's own
python backend (the nvidia-pytriton 0.7.0 wheel), driven with tritonclient.

`counted` runs the decoupled `repeat_py` model (IN = n answers 0 .. n-1) and squares each
of its responses in a second, ordinary step: every response of the decoupled step is an
iteration of its own, and the ensemble answers once per iteration over gRPC's
ModelStreamInfer, with COUNT and its SQUARE paired. The ensemble is decoupled itself
(its configuration says so, and a unary request is refused as for any decoupled model);
a step that mixes the request's tensors with a decoupled step's cannot load. The
expectations were taken from Triton 2.51 (triton-anchor.sh) with the same folders. For
the mixed ensemble Triton's error names the ensemble instead of the step ("step of
model 'mixed'") and its repository index shows the model without a state or reason;
Nereid names the step and reports the model UNAVAILABLE with that reason.
"""

import os
import queue
import shutil

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from conftest import REPO_ROOT
from triton_wheel import python_backend_directory, stub_environment

pytestmark = pytest.mark.timeout(600)

SQUARE_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * x)]))
        return out
'''

SQUARE_CONFIG = '''backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
'''

COUNTED = '''platform: "ensemble"
max_batch_size: 0
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "SQUARE" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "repeat_py" model_version: -1 input_map { key: "IN" value: "N" } output_map { key: "OUT" value: "COUNT" } },
  { model_name: "square" model_version: -1 input_map { key: "X" value: "COUNT" } output_map { key: "Y" value: "SQUARE" } }
] }
'''

# The second step also reads the request's own N: tensors of two lineages.
MIXED = COUNTED.replace('input_map { key: "X" value: "COUNT" }', 'input_map { key: "X" value: "N" }').replace(
    'output_map { key: "Y" value: "SQUARE" } }',
    'output_map { key: "Y" value: "SQUARE" } },\n'
    '  { model_name: "pair" model_version: -1 input_map { key: "A" value: "N" } input_map { key: "B" value: "COUNT" } '
    'output_map { key: "C" value: "PAIRED" } }',
).replace('{ name: "SQUARE" data_type: TYPE_INT32 dims: [ 1 ] } ]',
          '{ name: "SQUARE" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "PAIRED" data_type: TYPE_INT32 dims: [ 1 ] } ]')

PAIR_PY = SQUARE_PY.replace('"X"', '"A"').replace("x * x", "x + pb_utils.get_input_tensor_by_name(request, 'B').as_numpy()").replace('"Y"', '"C"')
PAIR_CONFIG = '''backend: "python"
max_batch_size: 0
input [ { name: "A" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "C" data_type: TYPE_INT32 dims: [ 1 ] } ]
'''


def write_repo(root):
    # The decoupled step: IN = n answers OUT = 0 .. n-1, then the final flag alone.
    shutil.copytree(os.path.join(REPO_ROOT, "tests", "python_backend_models", "repeat_py"), root / "repeat_py",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name, model_py, config in (("square", SQUARE_PY, SQUARE_CONFIG), ("pair", PAIR_PY, PAIR_CONFIG)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(model_py)
        (root / name / "config.pbtxt").write_text(config)
    for name, config in (("counted", COUNTED), ("mixed", MIXED)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from conftest import Server, base_args

    directory, env = python_backend_directory(), stub_environment()
    root = tmp_path_factory.mktemp("streaming_ensemble")
    write_repo(root)
    srv = Server(str(root), base_args(str(root), ["--backend-directory", directory, "--exit-on-error=false"]), env=env)
    try:
        srv.wait_started(timeout=120)
        yield srv
    finally:
        srv.kill()


def stream(client, model, n):
    """The responses of one streamed request, as (COUNT, SQUARE) pairs, and whether the
    last message was a final flag alone."""
    responses = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        value = grpcclient.InferInput("N", [1], "INT32")
        value.set_data_from_numpy(np.array([n], np.int32))
        client.async_stream_infer(model, [value], enable_empty_final_response=True)
        pairs = []
        while True:
            result, error = responses.get(timeout=30)
            assert error is None, error
            response = result.get_response()
            if response.outputs:
                pairs.append((int(result.as_numpy("COUNT")[0]), int(result.as_numpy("SQUARE")[0])))
            if response.parameters["triton_final_response"].bool_param:
                return pairs, not response.outputs
    finally:
        client.stop_stream()


def test_each_response_of_the_decoupled_step_is_one_ensemble_response(server):
    pairs, _ = stream(server.grpc_client(), "counted", 4)
    # The final flag rides on the last response when the decoupled step has ended by
    # then (as on Triton here), else it comes alone.
    assert sorted(pairs) == [(0, 0), (1, 1), (2, 4), (3, 9)]


def test_no_response_from_the_decoupled_step_is_a_final_flag_alone(server):
    assert stream(server.grpc_client(), "counted", 0) == ([], True)


def test_the_ensemble_is_decoupled(server):
    client = server.grpc_client()
    config = client.get_model_config("counted", as_json=True)["config"]
    assert config["model_transaction_policy"]["decoupled"] is True
    value = grpcclient.InferInput("N", [1], "INT32")
    value.set_data_from_numpy(np.array([2], np.int32))
    with pytest.raises(InferenceServerException) as refused:
        client.infer("counted", [value])
    assert "doesn't support models with decoupled transaction policy" in str(refused.value)


def test_a_step_mixing_lineages_cannot_load(server):
    index = {m["name"]: m for m in server.http_client().get_model_repository_index()}
    assert index["mixed"]["state"] == "UNAVAILABLE"
    assert ("in ensemble mixed, step of model 'pair' receives inputs originated from different decoupled models"
            in index["mixed"]["reason"]), index["mixed"]
