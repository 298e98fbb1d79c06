"""Triton's own python backend inside Nereid: `libtriton_python.so`, its stub and
`triton_python_backend_utils.py` from the nvidia-pytriton 0.7.0 wheel (Triton 2.51),
loaded unchanged through `--backend-directory` (Nereid provides the hashed core library
the backend names; see README "Triton backends"), driven with tritonclient.

One server serves most models (plain, batched, BLS to ONNX, ensemble, sequence, cache,
decoupled, errors, auto-complete, a crashing stub and one that fails to load); unload and
reload get their own server in explicit mode. The expectations are Triton 2.51's,
checked against it with the same model files. Skips with the reason when the wheel or
the stub's virtualenv cannot be had.
"""

import json
import os
import queue
import shutil

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import ADD_SUB_IO, EXAMPLE_MODELS, run_in_threads, wait_for
from triton_wheel import python_backend_directory, stub_environment

F32 = np.float32

# The first test also fetches the wheel and makes the stub's virtualenv.
pytestmark = pytest.mark.timeout(600)

ADD_SUB_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", (a + b).astype(np.float32)),
                pb_utils.Tensor("OUTPUT1", (a - b).astype(np.float32)),
            ]))
        return responses
'''

SLOW_ADD_SUB_PY = ADD_SUB_PY.replace("responses = []", "import time; time.sleep(0.05); responses = []")

BLS_PY = '''
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [pb_utils.get_input_tensor_by_name(request, n) for n in ("INPUT0", "INPUT1")]
            answer = pb_utils.InferenceRequest(
                model_name="add_sub_onnx", requested_output_names=["OUTPUT1"], inputs=inputs).exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            out = pb_utils.get_output_tensor_by_name(answer, "OUTPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("DIFF", out)]))
        return responses
'''

DOUBLE_PY = '''
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "DOUBLED", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 2)]) for r in requests]
'''

ACCUMULATE_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy().flatten()[0]
            corrid = int(pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy().flatten()[0])
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().flatten()[0]
            total = (0 if start else self.sums.get(corrid, 0)) + int(value)
            self.sums[corrid] = total
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT", np.array([[total]], dtype=np.int32))]))
        return responses
'''

REPEAT_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            for i in range(n):
                sender.send(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

BLS_STREAM_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            n = pb_utils.get_input_tensor_by_name(request, "IN")
            values = []
            for answer in pb_utils.InferenceRequest(
                    model_name="repeat_py", requested_output_names=["OUT"], inputs=[n]).exec(decoupled=True):
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                out = pb_utils.get_output_tensor_by_name(answer, "OUT")
                if out is not None:
                    values.append(int(out.as_numpy()[0]))
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("SEEN", np.array(values, dtype=np.int32))]))
        return responses
'''

FAILING_PY = '''
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if x[0] < 0:
                raise pb_utils.TritonModelException("negative input")
            out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("x must be negative")))
        return out
'''

AUTO_PY = '''
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [2]})
        config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [2]})
        config.set_max_batch_size(4)
        return config

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + 1)]) for r in requests]
'''

CRASH_PY = '''
import os

class TritonPythonModel:
    def execute(self, requests):
        os._exit(3)
'''

BROKEN_PY = "class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('cannot start')\n"

ONE_FP32 = """
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "%s" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""

MODELS = {
    "add_sub_py": (f'backend: "python"\nmax_batch_size: 8\n{ADD_SUB_IO}', ADD_SUB_PY),
    "batched_py": (f'backend: "python"\nmax_batch_size: 8\n{ADD_SUB_IO}\n'
                   'dynamic_batching { max_queue_delay_microseconds: 20000 }', SLOW_ADD_SUB_PY),
    "cached_py": (f'backend: "python"\nmax_batch_size: 8\n{ADD_SUB_IO}\nresponse_cache {{ enable: true }}',
                  ADD_SUB_PY),
    "bls_py": ('backend: "python"\nmax_batch_size: 8\n'
               'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },'
               ' { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
               'output [ { name: "DIFF" data_type: TYPE_FP32 dims: [ 4 ] } ]', BLS_PY),
    "double_py": ('backend: "python"\nmax_batch_size: 8\n'
                  'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
                  'output [ { name: "DOUBLED" data_type: TYPE_FP32 dims: [ 4 ] } ]', DOUBLE_PY),
    "accumulate_py": ('''backend: "python"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}''', ACCUMULATE_PY),
    "repeat_py": ('backend: "python"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: true }\n'
                  'input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
                  'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]', REPEAT_PY),
    "bls_stream_py": ('backend: "python"\nmax_batch_size: 0\n'
                      'input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
                      'output [ { name: "SEEN" data_type: TYPE_INT32 dims: [ -1 ] } ]', BLS_STREAM_PY),
    "failing_py": ('backend: "python"\nmax_batch_size: 0\n' + ONE_FP32 % "Y", FAILING_PY),
    "auto_py": ('backend: "python"', AUTO_PY),
    "crash_py": ('backend: "python"\nmax_batch_size: 0\n' + ONE_FP32 % "Y", CRASH_PY),
    "broken_py": ('backend: "python"\nmax_batch_size: 0\n' + ONE_FP32 % "Y", BROKEN_PY),
}

ENSEMBLE = '''platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "RESULT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "add_sub_onnx" model_version: -1
    input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "sum" } },
  { model_name: "double_py" model_version: -1
    input_map { key: "X" value: "sum" } output_map { key: "DOUBLED" value: "RESULT" } }
] }'''


def write_repo(root, names):
    for name in names:
        config, code = MODELS[name]
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(f'name: "{name}"\n{config}\n')
        (root / name / "1" / "model.py").write_text(code)


def add_sub_onnx(root):
    shutil.copytree(os.path.join(EXAMPLE_MODELS, "add_sub"), root / "add_sub_onnx")
    config = root / "add_sub_onnx" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "add_sub"', 'name: "add_sub_onnx"'))


@pytest.fixture(scope="module")
def backends():
    return python_backend_directory(), stub_environment()


@pytest.fixture(scope="module")
def pyserver(backends, tmp_path_factory):
    from conftest import Server, base_args

    directory, env = backends
    root = tmp_path_factory.mktemp("python_models")
    write_repo(root, [n for n in MODELS])
    add_sub_onnx(root)
    (root / "mixed_ensemble" / "1").mkdir(parents=True)
    (root / "mixed_ensemble" / "config.pbtxt").write_text(ENSEMBLE)
    srv = Server(str(root), base_args(str(root), [
        "--backend-directory", directory, "--exit-on-error=false",
        "--cache-config", "local,size=1048576"]), env=env)
    try:
        srv.wait_started(timeout=120)
        yield srv
    finally:
        srv.kill()


def add_sub_inputs(module, a, b):
    inputs = [module.InferInput("INPUT0", list(a.shape), "FP32"), module.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def one(module, name, value, datatype="FP32"):
    tensor = module.InferInput(name, list(value.shape), datatype)
    tensor.set_data_from_numpy(value)
    return [tensor]


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_plain_model_answers_with_requested_outputs(pyserver, module):
    client = pyserver.http_client() if module is httpclient else pyserver.grpc_client()
    a = np.array([[1, 2, 3, 4]], F32)
    b = np.array([[1, 1, 1, 1]], F32)
    result = client.infer("add_sub_py", add_sub_inputs(module, a, b))
    assert np.array_equal(result.as_numpy("OUTPUT0"), a + b)
    assert np.array_equal(result.as_numpy("OUTPUT1"), a - b)
    only = client.infer("add_sub_py", add_sub_inputs(module, a, b),
                        outputs=[module.InferRequestedOutput("OUTPUT1")])
    assert only.as_numpy("OUTPUT0") is None
    assert np.array_equal(only.as_numpy("OUTPUT1"), a - b)
    metadata = client.get_model_metadata("add_sub_py")
    platform = metadata["platform"] if module is httpclient else metadata.platform
    assert platform == "python"


def test_dynamic_batcher_batches_python_requests(pyserver):
    answers = {}

    def call(i):
        # A client per thread: tritonclient's clients are not thread-safe.
        client = pyserver.grpc_client()
        a = np.full((1, 4), i, F32)
        answers[i] = client.infer("batched_py", add_sub_inputs(grpcclient, a, a)).as_numpy("OUTPUT0")
        client.close()

    run_in_threads(call, 8)
    assert sorted(answers) == list(range(8))
    for i, out in answers.items():
        assert np.array_equal(out, np.full((1, 4), 2 * i, F32))
    stats = pyserver.http_client().get_inference_statistics("batched_py")["model_stats"][0]
    assert stats["inference_count"] == 8
    assert stats["execution_count"] < 8, stats


def test_bls_calls_an_onnx_model(pyserver):
    client = pyserver.grpc_client()
    a = np.array([[5, 6, 7, 8]], F32)
    b = np.array([[1, 2, 3, 4]], F32)
    result = client.infer("bls_py", add_sub_inputs(grpcclient, a, b))
    assert np.array_equal(result.as_numpy("DIFF"), a - b)


def test_ensemble_mixes_onnx_and_python_steps(pyserver):
    client = pyserver.http_client()
    a = np.array([[1, 2, 3, 4]], F32)
    b = np.array([[4, 3, 2, 1]], F32)
    inputs = [httpclient.InferInput("A", [1, 4], "FP32"), httpclient.InferInput("B", [1, 4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    assert np.array_equal(client.infer("mixed_ensemble", inputs).as_numpy("RESULT"), (a + b) * 2)


def test_sequence_model_gets_its_control_inputs(pyserver):
    client = pyserver.grpc_client()
    totals = {}
    for corrid, values in ((11, [1, 2, 3]), (12, [10, 20])):
        for i, v in enumerate(values):
            result = client.infer("accumulate_py", one(grpcclient, "INPUT", np.array([[v]], np.int32), "INT32"),
                                  sequence_id=corrid, sequence_start=i == 0,
                                  sequence_end=i == len(values) - 1)
            totals.setdefault(corrid, []).append(int(result.as_numpy("OUTPUT")[0][0]))
    assert totals == {11: [1, 3, 6], 12: [10, 30]}
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        client.infer("accumulate_py", one(grpcclient, "INPUT", np.array([[1]], np.int32), "INT32"),
                     sequence_id=99)


def test_response_cache_serves_the_second_request(pyserver):
    client = pyserver.http_client()
    a = np.array([[9, 9, 9, 9]], F32)
    for _ in range(2):
        assert np.array_equal(client.infer("cached_py", add_sub_inputs(httpclient, a, a)).as_numpy("OUTPUT0"), a + a)
    stats = client.get_inference_statistics("cached_py")["model_stats"][0]["inference_stats"]
    assert stats["cache_hit"]["count"] == 1
    assert stats["cache_miss"]["count"] == 1


def test_decoupled_model_streams_its_responses_over_grpc(pyserver):
    client = pyserver.grpc_client()
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer("repeat_py", one(grpcclient, "IN", np.array([3], np.int32), "INT32"),
                                  request_id="three")
        client.async_stream_infer("repeat_py", one(grpcclient, "IN", np.array([0], np.int32), "INT32"),
                                  request_id="none", enable_empty_final_response=True)
        got = []
        # Three responses, then the empty final one the second request asked for.
        while len(got) < 4:
            result, error = answers.get(timeout=10)
            assert error is None, error
            response = result.get_response()
            out = result.as_numpy("OUT")
            got.append((response.id, None if out is None else int(out[0]),
                        response.parameters["triton_final_response"].bool_param))
    finally:
        client.stop_stream()
    assert [g for g in got if g[0] == "three"] == [("three", 0, False), ("three", 1, False), ("three", 2, False)]
    assert [g for g in got if g[0] == "none"] == [("none", None, True)]


def test_bls_reads_a_decoupled_models_responses(pyserver):
    # The BLS request goes through TRITONSERVER_ServerInferAsync, whose response callback
    # gets each response of the decoupled model and then the final flag.
    result = pyserver.http_client().infer("bls_stream_py", one(httpclient, "IN", np.array([4], np.int32), "INT32"))
    assert result.as_numpy("SEEN").tolist() == [0, 1, 2, 3]


def test_generate_stream_sends_an_event_per_response(pyserver):
    body = json.dumps({"IN": [3]}).encode()
    events = pyserver.request("POST", "/v2/models/repeat_py/generate_stream", body)
    assert events.status == 200
    assert events.headers["content-type"].startswith("text/event-stream")
    data = [json.loads(line[len("data: "):]) for line in events.body.decode().split("\n\n") if line]
    assert [d["OUT"] for d in data] == [0, 1, 2]
    one_answer = pyserver.request("POST", "/v2/models/repeat_py/generate", json.dumps({"IN": [1]}).encode())
    assert one_answer.status == 200 and one_answer.json()["OUT"] == 0
    several = pyserver.request("POST", "/v2/models/repeat_py/generate", body)
    assert several.status == 500
    assert several.json()["error"] == (
        "generate expects model to produce exactly 1 response, use generate stream for model "
        "that generates various number of responses")


def test_decoupled_model_is_refused_where_one_answer_is_expected(pyserver):
    value = np.array([1], np.int32)
    with pytest.raises(InferenceServerException,
                       match="HTTP end point doesn't support models with decoupled transaction policy"):
        pyserver.http_client().infer("repeat_py", one(httpclient, "IN", value, "INT32"))
    with pytest.raises(InferenceServerException,
                       match="ModelInfer RPC doesn't support models with decoupled transaction policy"):
        pyserver.grpc_client().infer("repeat_py", one(grpcclient, "IN", value, "INT32"))


def test_errors_in_execute_reach_the_client(pyserver):
    client = pyserver.http_client()
    with pytest.raises(InferenceServerException, match="x must be negative"):
        client.infer("failing_py", one(httpclient, "X", np.array([1], F32)))
    with pytest.raises(InferenceServerException, match="negative input"):
        client.infer("failing_py", one(httpclient, "X", np.array([-1], F32)))


def test_auto_complete_config_fills_the_configuration(pyserver):
    client = pyserver.http_client()
    config = client.get_model_config("auto_py")
    assert config["max_batch_size"] == 4
    assert [(i["name"], i["dims"]) for i in config["input"]] == [("X", [2])]
    assert [(o["name"], o["dims"]) for o in config["output"]] == [("Y", [2])]
    result = client.infer("auto_py", one(httpclient, "X", np.array([[1, 2]], F32)))
    assert np.array_equal(result.as_numpy("Y"), np.array([[2, 3]], F32))


def test_a_crashing_stub_fails_its_requests_and_the_server_keeps_serving(pyserver):
    client = pyserver.http_client()
    with pytest.raises(InferenceServerException, match="Stub process 'crash_py_0' is not healthy"):
        client.infer("crash_py", one(httpclient, "X", np.array([1], F32)))
    a = np.ones((1, 4), F32)
    assert np.array_equal(client.infer("add_sub_py", add_sub_inputs(httpclient, a, a)).as_numpy("OUTPUT0"), a + a)


def test_a_model_failing_initialize_fails_alone(pyserver):
    index = {m["name"]: m for m in pyserver.http_client().get_model_repository_index()}
    assert index["broken_py"]["state"] == "UNAVAILABLE"
    assert "cannot start" in index["broken_py"]["reason"]
    assert index["add_sub_py"]["state"] == "READY"


def stubs_of(pid):
    """The python backend stub processes whose parent is `pid` (from /proc)."""
    stubs = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and b"triton_python_backend_stub" in command:
            stubs.append(int(entry))
    return stubs


def test_unload_ends_the_stub_and_leaves_no_shared_memory(backends, tmp_path, start_server):
    directory, env = backends
    write_repo(tmp_path, ["add_sub_py"])
    before = set(os.listdir("/dev/shm"))
    srv = start_server(str(tmp_path), "--backend-directory", directory, "--model-control-mode=explicit",
                       "--load-model=add_sub_py", env=env)
    client = srv.http_client()
    assert len(stubs_of(srv.proc.pid)) == 1
    created = set(os.listdir("/dev/shm")) - before
    assert created, "the stub's shared memory region exists while the model is loaded"
    client.unload_model("add_sub_py")
    wait_for(lambda: not stubs_of(srv.proc.pid), what="the stub to exit")
    wait_for(lambda: not (created & set(os.listdir("/dev/shm"))), what="the shared memory to go")
    client.load_model("add_sub_py")
    a = np.ones((1, 4), F32)
    assert np.array_equal(client.infer("add_sub_py", add_sub_inputs(httpclient, a, a)).as_numpy("OUTPUT1"), a - a)
    assert len(stubs_of(srv.proc.pid)) == 1


def test_a_missing_backend_library_fails_that_model_only(make_repo, start_server, tmp_path):
    repo = make_repo(["add_sub"], {"mystery": 'name: "mystery"\nbackend: "mystery"\nmax_batch_size: 0\n'
                                              'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
                                              'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]'})
    srv = start_server(repo, "--backend-directory", str(tmp_path / "none"), "--exit-on-error=false")
    index = {m["name"]: m for m in srv.http_client().get_model_repository_index()}
    assert index["add_sub"]["state"] == "READY"
    assert index["mystery"]["state"] == "UNAVAILABLE"
    assert "unable to find backend library for backend 'mystery'" in index["mystery"]["reason"]
    assert str(tmp_path / "none" / "mystery" / "libtriton_mystery.so") in index["mystery"]["reason"]
