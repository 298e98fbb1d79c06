"""Triton's python-based backends inside Nereid: a backend that is a folder with a
`model.py` (`<backend-directory>/<name>/model.py`, no `libtriton_<name>.so`), served by
Triton's python backend library (nvidia-pytriton 0.7.0, Triton 2.51) under its own name,
as every Triton vLLM model is (`backend: "vllm"`). With the backend-library resolution
rules around it: the `runtime` field (`model.py` explicitly, a library that escapes its
folder), the message when nothing is found, `--backend-config` settings resolved for
`python`, and the folder's `pb_exec_env_model.py.tar.gz` as execution environment.

The backend folders are written by this file into a backend directory of its own, beside
a link to the wheel's python backend: `mybackend` (doubles its input), `vllm` (a
deterministic stand-in for Triton's vLLM backend, which needs a GPU: same tensors, same
`model.json` in the version folder, decoupled, streaming) and `envbackend` (an empty
execution environment archive). Expected texts were taken from Triton 2.51
(triton-anchor.sh) with the same folders. Skips with the reason when the wheel or the
stub's virtualenv cannot be had.
"""

import json
import os
import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import Server, base_args
from triton_wheel import python_backend_directory, stub_environment

F32 = np.float32

# The first test also fetches the wheel and makes the stub's virtualenv.
pytestmark = pytest.mark.timeout(600)

MYBACKEND_PY = '''
"""A python-based backend of our own: OUTPUT0 = 2 * INPUT0."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * 2)]) for r in requests]
'''

# vLLM's tensors and files, without vLLM: the engine arguments come from model.json in
# the version folder (vLLM's message when it is missing), the "generation" is the
# prompt's words reversed, repeated up to max_tokens, each with a leading space as
# tokens are; streamed one token per response, or one response with the prompt first
# unless exclude_input_in_output.
VLLM_PY = '''
"""A deterministic stand-in for Triton's vLLM backend (src/model.py)."""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

_VLLM_ENGINE_ARGS_FILENAME = "model.json"


class TritonPythonModel:
    @classmethod
    def auto_complete_config(cls, auto_complete_model_config):
        inputs = [
            {"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]},
            {"name": "stream", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
            {"name": "sampling_parameters", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
            {"name": "exclude_input_in_output", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
        ]
        outputs = [{"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]}]
        config = auto_complete_model_config.as_dict()
        have_inputs = {i["name"] for i in config["input"]}
        have_outputs = {o["name"] for o in config["output"]}
        for i in inputs:
            if i["name"] not in have_inputs:
                auto_complete_model_config.add_input(i)
        for o in outputs:
            if o["name"] not in have_outputs:
                auto_complete_model_config.add_output(o)
        auto_complete_model_config.set_model_transaction_policy(dict(decoupled=True))
        auto_complete_model_config.set_max_batch_size(0)
        return auto_complete_model_config

    def initialize(self, args):
        self.model_config = json.loads(args["model_config"])
        assert pb_utils.using_decoupled_model_transaction_policy(self.model_config), (
            "vLLM Triton backend must be configured to use decoupled model transaction policy")
        model_dir = os.path.join(args["model_repository"], args["model_version"])
        engine_args = os.path.join(model_dir, _VLLM_ENGINE_ARGS_FILENAME)
        assert os.path.isfile(engine_args), (
            f"'{_VLLM_ENGINE_ARGS_FILENAME}' containing vllm engine args must be provided in '{model_dir}'")
        with open(engine_args) as f:
            self.engine_args = json.load(f)
        self.served_model = self.engine_args["model"]

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                self._generate(request, sender)
            except Exception as e:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    @staticmethod
    def _optional(request, name, default):
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        return default if tensor is None else tensor.as_numpy().reshape(-1)[0]

    def _generate(self, request, sender):
        prompt = self._optional(request, "text_input", b"")
        prompt = prompt.decode() if isinstance(prompt, bytes) else str(prompt)
        stream = bool(self._optional(request, "stream", False))
        exclude = bool(self._optional(request, "exclude_input_in_output", False))
        parameters = self._optional(request, "sampling_parameters", b"{}")
        parameters = json.loads(parameters.decode() if isinstance(parameters, bytes) else parameters)
        max_tokens = int(parameters.get("max_tokens", 16))
        words = list(reversed(prompt.split())) or [self.served_model]
        tokens = [" " + words[i % len(words)] for i in range(max_tokens)]

        def response(text):
            return pb_utils.InferenceResponse(
                [pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_))])

        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if not stream:
            sender.send(response(("" if exclude else prompt) + "".join(tokens)), flags=final)
            return
        if not tokens:
            sender.send(flags=final)
        for i, token in enumerate(tokens):
            sender.send(response(token), flags=final if i == len(tokens) - 1 else 0)
'''

DOUBLER_IO = """max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

# Laid out as Triton's vLLM backend documents it (samples/model_repository/vllm_model).
VLLM_CONFIG = """name: "vllm_model"
backend: "vllm"

# Disabling batching in Triton, let vLLM handle the batching on its own.
max_batch_size: 0

# We need to use decoupled transaction policy for saturating
# vLLM engine for max throughtput.
model_transaction_policy {
  decoupled: True
}

input [
  {
    name: "text_input"
    data_type: TYPE_STRING
    dims: [ 1 ]
  },
  {
    name: "stream"
    data_type: TYPE_BOOL
    dims: [ 1 ]
  },
  {
    name: "sampling_parameters"
    data_type: TYPE_STRING
    dims: [ 1 ]
    optional: true
  },
  {
    name: "exclude_input_in_output"
    data_type: TYPE_BOOL
    dims: [ 1 ]
    optional: true
  }
]

output [
  {
    name: "text_output"
    data_type: TYPE_STRING
    dims: [ -1 ]
  }
]

# The usage of device is deferred to the vLLM engine
instance_group [
  {
    count: 1
    kind: KIND_MODEL
  }
]
"""

MODEL_JSON = {"model": "facebook/opt-125m", "disable_log_requests": True,
              "gpu_memory_utilization": 0.5, "enforce_eager": True}


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.lstrip("\n"))


def backend_directory(root, wheel_backends):
    """A --backend-directory: the wheel's python backend (linked) and our own folders."""
    root.mkdir()
    os.symlink(os.path.join(wheel_backends, "python"), root / "python")
    write(root / "mybackend" / "model.py", MYBACKEND_PY)
    write(root / "vllm" / "model.py", VLLM_PY)
    write(root / "envbackend" / "model.py", MYBACKEND_PY)
    # An execution environment the python backend cannot unpack: its error shows the
    # archive was handed to it.
    (root / "envbackend" / "pb_exec_env_model.py.tar.gz").write_bytes(b"")
    return root


def model(repo, name, config, files=None):
    """A model folder with `config` and version 1 holding `files` ({name: text})."""
    write(repo / name / "config.pbtxt", f'name: "{name}"\n{config}')
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    for file, text in (files or {}).items():
        write(repo / name / "1" / file, text)


def repository(repo):
    repo.mkdir()
    model(repo, "doubler", 'backend: "mybackend"\n' + DOUBLER_IO)
    model(repo, "doubler_explicit", 'backend: "mybackend"\nruntime: "model.py"\n' + DOUBLER_IO)
    model(repo, "vllm_model", VLLM_CONFIG.replace('name: "vllm_model"\n', ""),
          {"model.json": json.dumps(MODEL_JSON, indent=4)})
    # Only `backend`: the rest from the backend's auto_complete_config, as newer vLLM
    # samples lay it out.
    model(repo, "vllm_auto", 'backend: "vllm"\ninstance_group [ { count: 1 kind: KIND_MODEL } ]\n',
          {"model.json": json.dumps(MODEL_JSON)})
    model(repo, "vllm_no_engine_args", VLLM_CONFIG.replace('name: "vllm_model"\n', ""))
    model(repo, "plain_python", 'backend: "python"\n' + DOUBLER_IO, {"model.py": MYBACKEND_PY})
    model(repo, "nope", 'backend: "nope"\n' + DOUBLER_IO)
    model(repo, "escaping", 'backend: "mybackend"\nruntime: "../python/libtriton_python.so"\n' + DOUBLER_IO)
    model(repo, "missing_runtime", 'backend: "mybackend"\nruntime: "libtriton_missing.so"\n' + DOUBLER_IO)
    model(repo, "no_folder", 'backend: "nodir"\nruntime: "model.py"\n' + DOUBLER_IO)
    model(repo, "with_env", 'backend: "envbackend"\n' + DOUBLER_IO)
    return repo


def shm_regions(prefix):
    return [name for name in os.listdir("/dev/shm") if name.startswith(prefix)]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    wheel_backends, env = python_backend_directory(), stub_environment()
    root = tmp_path_factory.mktemp("python_based")
    return backend_directory(root / "backends", wheel_backends), repository(root / "models"), env


@pytest.fixture(scope="module")
def pbserver(setup):
    backends, repo, env = setup
    prefix = f"nereid_pbb_{os.getpid()}_"
    # Settings for `python` reach the python-based backends; those named after a
    # python-based backend do not (a zero stub timeout would fail its initialization).
    srv = Server(str(repo), base_args(str(repo), [
        "--backend-directory", str(backends), "--model-control-mode=explicit",
        "--load-model=doubler", "--load-model=doubler_explicit", "--load-model=vllm_model",
        "--backend-config", f"python,shm-region-prefix-name={prefix}",
        "--backend-config", "mybackend,stub-timeout-seconds=0",
        "--backend-config", "vllm,stub-timeout-seconds=0"]), env=env)
    srv.prefix = prefix
    try:
        srv.wait_started(timeout=120)
        yield srv
    finally:
        srv.kill()
        for name in shm_regions(prefix):
            os.unlink(os.path.join("/dev/shm", name))


def load_error(srv, name):
    """The message of loading model `name`, which must fail."""
    with pytest.raises(InferenceServerException) as failed:
        srv.http_client().load_model(name)
    return failed.value.message()


def unavailable(name, reason):
    return f"load failed for model '{name}': version 1 is at UNAVAILABLE state: {reason};"


def doubled(module, client, name):
    x = np.array([1, 2, 3, 4], F32)
    tensor = module.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(x)
    return client.infer(name, [tensor]).as_numpy("OUTPUT0").tolist()


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_backend_folder_with_model_py_serves_models_without_their_own(pbserver, module):
    client = pbserver.http_client() if module is httpclient else pbserver.grpc_client()
    assert doubled(module, client, "doubler") == [2, 4, 6, 8]
    # `runtime: "model.py"` given explicitly is the same backend.
    assert doubled(module, client, "doubler_explicit") == [2, 4, 6, 8]


def test_the_configuration_says_model_py_runs_and_the_backend_is_shared(pbserver):
    client = pbserver.http_client()
    config = client.get_model_config("doubler")
    assert (config["backend"], config["runtime"]) == ("mybackend", "model.py")
    assert "EXECUTION_ENV_PATH" not in config.get("parameters", {})
    # One backend object per library and name, shared by the models that use it.
    log = pbserver.log()
    assert log.count("loaded python-based backend 'mybackend'") == 1, log
    assert log.count("loaded python-based backend 'vllm'") == 1, log


def test_python_settings_reach_the_python_based_backend(pbserver):
    # The stubs' shared memory is named by the prefix given to `python`; the zero stub
    # timeouts given to `mybackend` and `vllm` were not applied (the models loaded).
    assert len(shm_regions(pbserver.prefix)) >= 3


def test_plain_python_models_share_the_library_with_python_based_backends(pbserver):
    client = pbserver.http_client()
    client.load_model("plain_python")
    try:
        assert doubled(httpclient, client, "plain_python") == [2, 4, 6, 8]
        assert doubled(httpclient, client, "doubler") == [2, 4, 6, 8]
    finally:
        client.unload_model("plain_python")


def generate_stream(srv, name, body):
    resp = srv.request("POST", f"/v2/models/{name}/generate_stream", json.dumps(body).encode())
    assert resp.status == 200, resp
    assert resp.headers["content-type"].startswith("text/event-stream")
    return [json.loads(event[len("data: "):]) for event in resp.body.decode().split("\n\n") if event]


def test_vllm_model_streams_over_http_generate_stream(pbserver):
    events = generate_stream(pbserver, "vllm_model", {
        "text_input": "What is Triton", "stream": True,
        "sampling_parameters": json.dumps({"max_tokens": 4, "temperature": 0})})
    assert [e["text_output"] for e in events] == [" Triton", " is", " What", " Triton"]
    assert all((e["model_name"], e["model_version"]) == ("vllm_model", "1") for e in events)
    # Not streamed: one answer, the prompt first unless excluded.
    events = generate_stream(pbserver, "vllm_model", {
        "text_input": "a b", "stream": False, "sampling_parameters": json.dumps({"max_tokens": 3})})
    assert [e["text_output"] for e in events] == ["a b b a b"]
    resp = pbserver.request("POST", "/v2/models/vllm_model/generate", json.dumps({
        "text_input": "a b", "stream": False, "exclude_input_in_output": True,
        "sampling_parameters": json.dumps({"max_tokens": 2})}).encode())
    assert resp.status == 200 and resp.json()["text_output"] == " b a", resp


def vllm_inputs(prompt, stream, sampling=None, exclude=None):
    def tensor(name, value, datatype):
        t = grpcclient.InferInput(name, [1], datatype)
        t.set_data_from_numpy(np.array([value], dtype=np.object_ if datatype == "BYTES" else bool))
        return t

    inputs = [tensor("text_input", prompt.encode(), "BYTES"), tensor("stream", stream, "BOOL")]
    if sampling is not None:
        inputs.append(tensor("sampling_parameters", json.dumps(sampling).encode(), "BYTES"))
    if exclude is not None:
        inputs.append(tensor("exclude_input_in_output", exclude, "BOOL"))
    return inputs


def stream_texts(client, name, inputs, request_id):
    """The text of each response to one streamed request, until its final one."""
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    texts = []
    try:
        client.async_stream_infer(name, inputs, request_id=request_id, enable_empty_final_response=True)
        while True:
            result, error = answers.get(timeout=30)
            assert error is None, error
            response = result.get_response()
            assert response.id == request_id
            out = result.as_numpy("text_output")
            if out is not None:
                texts.append(out[0].decode())
            if response.parameters["triton_final_response"].bool_param:
                return texts
    finally:
        client.stop_stream()


def test_vllm_model_streams_over_grpc(pbserver):
    client = pbserver.grpc_client()
    texts = stream_texts(client, "vllm_model", vllm_inputs("one two three", True, {"max_tokens": 5}), "s")
    assert texts == [" three", " two", " one", " three", " two"]
    texts = stream_texts(client, "vllm_model", vllm_inputs("one two", False, {"max_tokens": 2}, True), "n")
    assert texts == [" two one"]


def test_vllm_backend_completes_a_configuration_naming_only_the_backend(pbserver):
    client = pbserver.http_client()
    client.load_model("vllm_auto")
    try:
        config = client.get_model_config("vllm_auto")
        assert config["model_transaction_policy"] == {"decoupled": True}
        assert [i["name"] for i in config["input"]] == [
            "text_input", "stream", "sampling_parameters", "exclude_input_in_output"]
        texts = stream_texts(pbserver.grpc_client(), "vllm_auto", vllm_inputs("x y", True, {"max_tokens": 2}), "a")
        assert texts == [" y", " x"]
    finally:
        client.unload_model("vllm_auto")


def test_vllm_model_reads_its_engine_arguments_from_the_version_folder(pbserver, setup):
    _, repo, _ = setup
    message = load_error(pbserver, "vllm_no_engine_args")
    assert (f"'model.json' containing vllm engine args must be provided in "
            f"'{repo / 'vllm_no_engine_args' / '1'}'") in message, message


def test_no_library_and_no_model_py_is_tritons_message(pbserver):
    assert load_error(pbserver, "nope") == unavailable("nope", (
        "unable to find backend library for backend 'nope', try specifying runtime on the model configuration."))


def test_a_runtime_escaping_its_folder_is_refused(pbserver, setup):
    backends, _, _ = setup
    assert load_error(pbserver, "escaping") == unavailable("escaping", (
        f"backend library name '../python/libtriton_python.so' escapes backend directory "
        f"'{backends / 'mybackend'}', for model 'escaping', check model config runtime field"))


def test_a_runtime_not_found_names_the_folders_searched(pbserver, setup):
    backends, repo, _ = setup
    folder = repo / "missing_runtime"
    assert load_error(pbserver, "missing_runtime") == unavailable("missing_runtime", (
        f"unable to find backend library 'libtriton_missing.so' for model 'missing_runtime', searched: "
        f"'{folder / '1'}' '{folder}' '{backends / 'mybackend'}' "))
    assert load_error(pbserver, "no_folder") == unavailable("no_folder", (
        f"unable to find Python backend based backend library 'model.py' for model 'no_folder', "
        f"searched: '{backends / 'nodir' / 'model.py'}'"))


def test_the_backend_folders_execution_environment_is_used(pbserver):
    # Triton 2.51 answers the same: its python backend could not open the empty archive
    # the core named in EXECUTION_ENV_PATH.
    assert "archive_read_open_filename() failed." in load_error(pbserver, "with_env")


def test_a_library_in_the_models_own_folders_serves_it(tmp_path, start_server):
    # Triton's search order for a C++ library: <model>/<version>/, <model>/, then the
    # backend directory (empty here), the folder found being the backend's artifacts.
    # Nereid's test backend, built as test_hosted_backend builds it, echoes IN to OUT; it
    # checks that its artifacts folder has its name in it, so the models' names do.
    from test_hosted_backend import build

    repo = tmp_path / "models"
    io = ('max_batch_size: 0\ninput [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
          'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }, '
          '{ name: "META" data_type: TYPE_INT64 dims: [ 5 ] } ]\n'
          'parameters { key: "mode" value { string_value: "echo" } }\n')
    beside, in_version = repo / "nereid_test_beside", repo / "nereid_test_in_version"
    model(repo, beside.name, 'backend: "nereid_test"\n' + io)
    build(repo, beside.name)  # <model>/libtriton_<model>.so, renamed for the backend
    os.rename(beside / f"libtriton_{beside.name}.so", beside / "libtriton_nereid_test.so")
    model(repo, in_version.name, 'backend: "nereid_test"\nruntime: "libcustom.so"\n' + io)
    build(in_version, "1")  # <model>/1/libtriton_1.so, renamed as the runtime says
    os.rename(in_version / "1" / "libtriton_1.so", in_version / "1" / "libcustom.so")
    srv = start_server(str(repo), "--backend-directory", str(tmp_path / "empty"))
    client = srv.http_client()
    for name in (beside.name, in_version.name):
        tensor = httpclient.InferInput("IN", [2], "FP32")
        tensor.set_data_from_numpy(np.array([1.5, 2], F32))
        assert client.infer(name, [tensor]).as_numpy("OUT").tolist() == [1.5, 2], name
    # Two libraries, so two backends of the same name.
    log = srv.log()
    assert f"loaded backend 'nereid_test' from {beside / 'libtriton_nereid_test.so'}" in log, log
    assert f"loaded backend 'nereid_test' from {in_version / '1' / 'libcustom.so'}" in log, log
