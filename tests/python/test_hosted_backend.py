"""Nereid hosting a Triton backend library: crates/triton-abi/tests/backend/test_backend.c,
built here with `cc` against the ABI (no Triton header, no link to any Triton library),
is loaded from `--backend-directory` as `nereid_test/libtriton_nereid_test.so` and driven
with tritonclient: inputs and buffers, requested outputs, correlation ids, flags,
parameters, timeouts, statistics, the memory manager, backend/model/instance state,
auto-completion through TRITONBACKEND_ModelSetConfig, decoupled responses from another
thread, BLS through TRITONSERVER_ServerInferAsync, and every way a backend can fail.
"""

import os
import queue
import shutil
import subprocess
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import EXAMPLE_MODELS, REPO_ROOT

SOURCE = os.path.join(REPO_ROOT, "crates", "triton-abi", "tests", "backend", "test_backend.c")
F32 = np.float32


def build(directory, name, *flags):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the test backend")
    target = directory / name / f"libtriton_{name}.so"
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", *flags, "-o", str(target),
                    SOURCE, "-lpthread"], check=True)


def model(root, name, mode, backend="nereid_test", io=None, extra=""):
    io = io if io is not None else """
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "META" data_type: TYPE_INT64 dims: [ 5 ] } ]"""
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "{backend}"\n{io}\n'
        f'parameters {{ key: "mode" value {{ string_value: "{mode}" }} }}\n{extra}')


@pytest.fixture(scope="module")
def hosted(tmp_path_factory):
    from conftest import Server, base_args

    backends = tmp_path_factory.mktemp("backends")
    build(backends, "nereid_test")
    build(backends, "no_execute", "-DNO_EXECUTE", "-Wno-unused-function")
    build(backends, "too_new", "-DNEEDS_NEWER_API")
    root = tmp_path_factory.mktemp("hosted_models")
    model(root, "echo", "echo", extra="max_batch_size: 0")
    model(root, "batched", "echo", extra="max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 50000 }",
          io="""
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] }, { name: "META" data_type: TYPE_INT64 dims: [ 5 ] } ]""")
    model(root, "streaming", "decoupled", extra="model_transaction_policy { decoupled: true }", io="""
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]""")
    model(root, "accumulating", "accumulate", extra="""max_batch_size: 0
instance_group [ { kind: KIND_CPU count: 2 } ]
sequence_batching { max_sequence_idle_microseconds: 60000000
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32
  dims: [ 1 ] use_same_buffer_for_input_output: true } ] }""", io="""
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "SAME" data_type: TYPE_INT32 dims: [ 1 ] } ]""")
    model(root, "refusing", "error")
    model(root, "failing", "fail")
    model(root, "silent", "silent")
    model(root, "unallocated", "unallocated")
    model(root, "stateless", "state")
    model(root, "bls", "bls", extra="max_batch_size: 8", io="""
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]""")
    model(root, "auto", "auto", io="")
    model(root, "querying", "query", io="""
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT64 dims: [ 3 ] } ]""")
    model(root, "bad_model", "fail_model")
    model(root, "bad_instance", "fail_instance")
    model(root, "headless", "echo", backend="no_execute")
    model(root, "too_new", "echo", backend="too_new")
    model(root, "refused_backend", "echo", backend="refuse_me")
    build(backends, "refuse_me")
    shutil.copytree(os.path.join(EXAMPLE_MODELS, "add_sub"), root / "add_sub")
    srv = Server(str(root), base_args(str(root), [
        "--backend-directory", str(backends), "--exit-on-error=false",
        "--backend-config=refuse_me,refuse=yes", "--backend-config=nereid_test,greeting=hi"]))
    try:
        srv.wait_started(timeout=60)
        yield srv
    finally:
        srv.kill()


def fp32(module, values, name="IN"):
    array = np.array(values, F32)
    tensor = module.InferInput(name, list(array.shape), "FP32")
    tensor.set_data_from_numpy(array)
    return tensor


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_backend_asking_where_an_output_goes_is_told_host_memory(hosted, module):
    """TRITONBACKEND_RequestOutputBufferProperties over HTTP and gRPC: an output not in a
    CUDA shared-memory region is encoded from host memory, device 0, as Triton's frontends
    answer (the backend asked for CPU_PINNED on device 1 and writes what it was told)."""
    client = hosted.http_client() if module is httpclient else hosted.grpc_client()
    value = module.InferInput("IN", [1], "INT32")
    value.set_data_from_numpy(np.array([1], np.int32))
    result = client.infer("querying", [value])
    assert result.as_numpy("OUT").tolist() == [0, 0, 16]


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_inputs_outputs_and_request_metadata(hosted, module):
    client = hosted.http_client() if module is httpclient else hosted.grpc_client()
    result = client.infer("echo", [fp32(module, [1.5, -2, 3])], request_id="r1", timeout=7000,
                          parameters={"add": 5, "note": "x"})
    assert np.array_equal(result.as_numpy("OUT"), np.array([1.5, -2, 3], F32))
    correlation, flags, parameter_count, add, timeout = result.as_numpy("META").tolist()
    assert (correlation, flags, parameter_count, add, timeout) == (0, 0, 2, 5, 7000)
    only_meta = client.infer("echo", [fp32(module, [1])], outputs=[module.InferRequestedOutput("META")])
    assert only_meta.as_numpy("OUT") is None
    # Parameters the backend set on its response reach the client, each as its kind.
    if module is httpclient:
        parameters = result.get_response()["parameters"]
    else:
        raw = result.get_response(as_json=True)["parameters"]
        parameters = {k: next(iter(v.values())) for k, v in raw.items()}
        parameters["count"] = int(parameters["count"])
    assert parameters == {"note": "x", "count": 2, "echoed": True, "ratio": 0.5}
    assert "parameters" not in client.infer("echo", [fp32(module, [1])]).get_response(
        **({} if module is httpclient else {"as_json": True}))


def test_batches_reach_the_backend_and_statistics_come_back(hosted):
    from conftest import run_in_threads

    answers = {}

    def call(i):
        client = hosted.grpc_client()
        answers[i] = client.infer("batched", [fp32(grpcclient, [[i, -i]])]).as_numpy("OUT")
        client.close()

    run_in_threads(call, 6)
    assert all(np.array_equal(answers[i], np.array([[i, -i]], F32)) for i in range(6))
    stats = hosted.http_client().get_inference_statistics("batched")["model_stats"][0]
    assert stats["inference_count"] == 6
    assert stats["execution_count"] < 6
    # The backend reports 10 ns for each phase of every batch.
    for batch in stats["batch_stats"]:
        assert batch["compute_infer"]["ns"] == 10 * batch["compute_infer"]["count"], batch
        assert batch["compute_input"]["ns"] == 10 * batch["compute_input"]["count"], batch


def test_decoupled_responses_stream_from_another_thread(hosted):
    client = hosted.grpc_client()
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        value = np.array([4], np.int32)
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(value)
        client.async_stream_infer("streaming", [tensor], request_id="s", enable_empty_final_response=True)
        got = []
        while not got or not got[-1][1]:
            result, error = answers.get(timeout=10)
            assert error is None, error
            out = result.as_numpy("OUT")
            got.append((None if out is None else int(out[0]),
                        result.get_response().parameters["triton_final_response"].bool_param))
    finally:
        client.stop_stream()
    assert got == [(0, False), (1, False), (2, False), (3, False), (None, True)]


def test_reported_response_statistics_count_per_response_index(hosted):
    """TRITONBACKEND_ModelInstanceReportResponseStatistics, as Triton's square backend
    calls it: each of the four responses under its index, the final flag alone as an
    empty response at index 4; the same figures over HTTP and gRPC."""
    client = hosted.grpc_client()
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([4], np.int32))
        client.async_stream_infer("streaming", [tensor], enable_empty_final_response=True)
        while True:
            result, error = answers.get(timeout=10)
            assert error is None, error
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
    finally:
        client.stop_stream()
    http = hosted.http_client()
    deadline = time.monotonic() + 10
    while True:  # the final flag's statistics are reported after it was sent
        stats = http.get_inference_statistics("streaming")["model_stats"][0]["response_stats"]
        if "4" in stats or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert sorted(stats) == ["0", "1", "2", "3", "4"]
    runs = stats["0"]["success"]["count"]  # earlier tests may have streamed too
    for index in range(4):
        stat = stats[str(index)]
        assert stat["success"] == {"count": runs, "ns": 60 * runs}, stat
        assert stat["compute_infer"] == {"count": runs, "ns": 40 * runs}, stat
        assert stat["compute_output"] == {"count": runs, "ns": 20 * runs}, stat
        assert stat["fail"] == stat["empty_response"] == stat["cancel"] == {"count": 0, "ns": 0}
    final = stats["4"]
    assert final["empty_response"] == final["compute_infer"] == {"count": runs, "ns": 7 * runs}
    assert final["success"] == {"count": 0, "ns": 0}
    over_grpc = client.get_inference_statistics("streaming").model_stats[0].response_stats
    assert sorted(over_grpc) == sorted(stats)
    assert over_grpc["2"].compute_output.ns == 20 * runs
    assert over_grpc["4"].empty_response.count == runs


def test_a_single_buffer_state_is_updated_in_place(hosted):
    """use_same_buffer_for_input_output: the backend gets the state input's own buffer
    as the state it writes, adds to it in place and never calls StateUpdate; the value
    carries to the next request of the sequence (Triton's L0_implicit_state
    single-buffer case), two sequences apart on two instances."""
    client = hosted.http_client()

    def step(sequence, value, start=False, end=False):
        tensor = httpclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([value], np.int32))
        result = client.infer("accumulating", [tensor], sequence_id=sequence,
                              sequence_start=start, sequence_end=end)
        return int(result.as_numpy("OUT")[0]), int(result.as_numpy("SAME")[0])

    assert step(7, 2, start=True) == (2, 1)
    assert step(8, 10, start=True) == (10, 1)
    assert step(7, 3) == (5, 1)
    assert step(8, 1) == (11, 1)
    assert step(7, 4, end=True) == (9, 1)
    # A new sequence under the same id starts from the initial state again.
    assert step(7, 1, start=True, end=True) == (1, 1)


def test_bls_through_the_models_server(hosted):
    result = hosted.http_client().infer("bls", [fp32(httpclient, [[1, 2, 3, 4]])])
    assert np.array_equal(result.as_numpy("OUT"), np.array([[2, 4, 6, 8]], F32))


def test_auto_complete_through_model_set_config(hosted):
    client = hosted.http_client()
    config = client.get_model_config("auto")
    assert [i["name"] for i in config["input"]] == ["IN"]
    assert config["parameters"]["mode"]["string_value"] == "echo"
    assert np.array_equal(client.infer("auto", [fp32(httpclient, [7])]).as_numpy("OUT"), np.array([7], F32))


def test_backend_errors_reach_the_client_and_the_server_keeps_serving(hosted):
    client = hosted.http_client()
    with pytest.raises(InferenceServerException, match="the test backend refuses this request"):
        client.infer("refusing", [fp32(httpclient, [1])])
    with pytest.raises(InferenceServerException,
                       match=r"model 'failing' \(backend 'nereid_test'\): execute failed on purpose"):
        client.infer("failing", [fp32(httpclient, [1])])
    with pytest.raises(InferenceServerException,
                       match=r"model 'silent' \(backend 'nereid_test'\) released a request without sending its final response"):
        client.infer("silent", [fp32(httpclient, [1])])
    # An output whose buffer the backend never filled fails rather than coming back short.
    with pytest.raises(InferenceServerException,
                       match=r"output 'OUT' of shape \[2\] \(FP32\) needs 8 bytes, but the backend gave 0"):
        client.infer("unallocated", [fp32(httpclient, [1])])
    assert client.infer("echo", [fp32(httpclient, [1])]).as_numpy("OUT").tolist() == [1.0]


def test_a_state_the_model_does_not_declare_is_refused_in_tritons_words(hosted):
    """TRITONBACKEND_StateNew for a model without sequence_batching states (Triton's
    implicit_state backend checks this message in L0_implicit_state)."""
    with pytest.raises(InferenceServerException,
                       match=r"unable to add state 'UNDECLARED'\. State configuration is missing for model 'stateless'\."):
        hosted.http_client().infer("stateless", [fp32(httpclient, [1])])


def test_failed_loads_name_the_backend_and_fail_alone(hosted):
    index = {m["name"]: m for m in hosted.http_client().get_model_repository_index()}
    reasons = {name: index[name].get("reason", "") for name in index}
    assert index["echo"]["state"] == "READY" and index["add_sub"]["state"] == "READY"
    assert "model initialization failed on purpose" in reasons["bad_model"]
    assert "(backend 'nereid_test')" in reasons["bad_model"]
    assert "instance initialization failed on purpose" in reasons["bad_instance"]
    assert "(backend 'nereid_test')" in reasons["bad_instance"]
    assert "unable to find required entrypoint 'TRITONBACKEND_ModelInstanceExecute'" in reasons["headless"]
    assert "backend 'no_execute'" in reasons["headless"]
    assert ("failed to initialize backend 'too_new': Triton backend API version does not support this backend"
            in reasons["too_new"])
    assert "failed to initialize backend 'refuse_me': refused by --backend-config" in reasons["refused_backend"]
    for name in ("bad_model", "bad_instance", "headless", "too_new", "refused_backend"):
        assert index[name]["state"] == "UNAVAILABLE", index[name]
