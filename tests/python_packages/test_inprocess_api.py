"""Triton's in-process Python API (`tritonserver` 2.73) on Nereid's libtritonserver.so.

One server in explicit model control mode for the module, with the example ONNX add_sub
and identity_fp32 and, when Triton's python backend is at hand, the decoupled stream_py
(tests/python_packages/models). Import and the log callback run in child processes of
their own (a log callback is process-wide).
"""

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from conftest import (
    library_dir,
    python_backend_directory,
    remove_shm_regions,
    require_onnxruntime,
    shm_prefix,
    write_repository,
)

pytestmark = pytest.mark.timeout(300)

F32 = np.float32


@pytest.fixture(scope="module")
def backend_dir():
    """Triton's python backend folder, or None (the decoupled tests then skip)."""
    try:
        return python_backend_directory()
    except (pytest.skip.Exception, pytest.fail.Exception):  # the tests that need it say why
        return None


@pytest.fixture(scope="module")
def server(tritonserver, backend_dir, tmp_path_factory):
    require_onnxruntime()
    names = ["add_sub", "identity_fp32"] + (["stream_py"] if backend_dir else [])
    repo = write_repository(tmp_path_factory.mktemp("python_api_models"), names)
    # add_sub whose requests wait up to a second in the dynamic batcher's queue.
    queued = os.path.join(repo, "add_sub_queued")
    shutil.copytree(os.path.join(repo, "add_sub"), queued)
    config = os.path.join(queued, "config.pbtxt")
    with open(config) as f:
        text = f.read().replace('name: "add_sub"', 'name: "add_sub_queued"')
    with open(config, "w") as f:
        f.write(text + "dynamic_batching { preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 1000000 }\n")
    prefix = shm_prefix()
    options = tritonserver.Options(
        server_id="nereid-python-api",
        model_repository=repo,
        model_control_mode=tritonserver.ModelControlMode.EXPLICIT,
        log_error=True,
        exit_timeout=10,
        backend_configuration={"python": {"shm-region-prefix-name": prefix}},
    )
    if backend_dir:
        options.backend_directory = backend_dir
    srv = tritonserver.Server(options).start(wait_until_ready=True, timeout=60)
    try:
        srv.load("add_sub")
        yield srv
    finally:
        srv.stop()
        remove_shm_regions(prefix)


@pytest.fixture(scope="module")
def stream_model(server, backend_dir):
    """stream_py, loaded through Triton's python backend (its own fixture: a backend
    that fails to load fails the decoupled tests only)."""
    if not backend_dir:
        python_backend_directory()  # skips (fails under CI) with the reason
    return server.load("stream_py")


def as_numpy(tensor):
    """A copy of an output tensor (its memory belongs to the response)."""
    return np.array(np.from_dlpack(tensor), copy=True)


def add_sub_inputs(batch=1):
    a = np.arange(4 * batch, dtype=F32).reshape(batch, 4)
    b = np.full((batch, 4), 0.5, dtype=F32)
    return a, b


CHILD = textwrap.dedent("""
    import json, sys
    loaded = lambda: sorted({l.split()[-1] for l in open("/proc/self/maps") if "libtritonserver" in l})
    before = loaded()
    import tritonserver, tritonfrontend
    print(json.dumps({"before": before, "after": loaded(),
                      "tritonserver": tritonserver.__version__, "file": tritonserver.__file__}))
""")


def test_import_with_nothing_preloaded():
    """`import tritonserver` in a fresh interpreter with nothing preloaded binds the
    extension module to Nereid's library, found by name through LD_LIBRARY_PATH."""
    directory = library_dir()
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    result = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"import tritonserver, tritonfrontend failed:\n{result.stderr[-3000:]}"
    info = json.loads(result.stdout.strip().splitlines()[-1])
    assert info["before"] == []
    assert info["after"] == [os.path.join(directory, "libtritonserver.so")]
    assert info["tritonserver"] == "2.73.0"


def test_live_ready_and_metadata(server):
    assert server.live()
    assert server.ready()
    metadata = server.metadata()
    assert metadata["name"] == "nereid-python-api"
    assert isinstance(metadata["version"], str) and metadata["version"]
    assert isinstance(metadata["extensions"], list)


def test_models_lists_the_repository(server):
    models = server.models()
    states = {key: model.state for key, model in models.items()}
    assert states[("add_sub", 1)] == "READY"
    # identity_fp32 is in the repository but not loaded (explicit mode).
    assert "identity_fp32" in {name for name, _ in models}
    assert ("identity_fp32", 1) not in models or models[("identity_fp32", 1)].state != "READY"
    ready = server.models(exclude_not_ready=True)
    assert ("add_sub", 1) in ready
    assert all(model.state == "READY" for model in ready.values())


def test_infer_add_sub(server):
    a, b = add_sub_inputs()
    responses = list(server.model("add_sub").infer(inputs={"INPUT0": a, "INPUT1": b}, request_id="req-1"))
    assert len(responses) == 1
    response = responses[0]
    assert response.error is None
    assert response.final
    assert response.model.name == "add_sub"
    assert response.model.version == 1
    assert response.request_id == "req-1"
    assert sorted(response.outputs) == ["OUTPUT0", "OUTPUT1"]
    out0, out1 = as_numpy(response.outputs["OUTPUT0"]), as_numpy(response.outputs["OUTPUT1"])
    assert out0.dtype == F32 and out0.shape == (1, 4)
    np.testing.assert_array_equal(out0, a + b)
    np.testing.assert_array_equal(out1, a - b)


def test_infer_batch_and_request_object(server):
    model = server.model("add_sub")
    a, b = add_sub_inputs(batch=3)
    request = model.create_request()
    request.inputs["INPUT0"] = a
    request.inputs["INPUT1"] = tritonserver_tensor(b)
    (response,) = list(model.infer(request))
    np.testing.assert_array_equal(as_numpy(response.outputs["OUTPUT0"]), a + b)
    np.testing.assert_array_equal(as_numpy(response.outputs["OUTPUT1"]), a - b)


def tritonserver_tensor(array):
    import tritonserver

    tensor = tritonserver.Tensor.from_dlpack(array)
    assert tensor.data_type == tritonserver.DataType.FP32
    return tensor


def test_infer_errors_are_raised(server, tritonserver):
    a, b = add_sub_inputs()
    with pytest.raises(tritonserver.TritonError) as info:
        list(server.model("add_sub").infer(inputs={"INPUT0": a, "NOT_AN_INPUT": b}))
    assert "NOT_AN_INPUT" in str(info.value) or "INPUT1" in str(info.value)
    with pytest.raises(tritonserver.TritonError):
        list(server.model("no_such_model").infer(inputs={"INPUT0": a}))


def test_async_infer(server):
    model = server.model("add_sub")

    async def one(offset):
        a, b = add_sub_inputs()
        a = a + offset
        responses = [r async for r in model.async_infer(inputs={"INPUT0": a, "INPUT1": b})]
        assert len(responses) == 1 and responses[0].final
        return a, b, as_numpy(responses[0].outputs["OUTPUT0"]), as_numpy(responses[0].outputs["OUTPUT1"])

    async def many():
        return await asyncio.gather(*(one(i) for i in range(8)))

    for a, b, out0, out1 in asyncio.run(many()):
        np.testing.assert_array_equal(out0, a + b)
        np.testing.assert_array_equal(out1, a - b)


def test_load_unload_explicit(server, tritonserver):
    model = server.load("identity_fp32")
    assert model.ready()
    x = np.array([[1.5, -2.0, 3.25]], dtype=F32)
    (response,) = list(model.infer(inputs={"INPUT0": x}))
    np.testing.assert_array_equal(as_numpy(response.outputs["OUTPUT0"]), x)

    server.unload("identity_fp32", wait_until_unloaded=True, timeout=60)
    # As in Triton 2.51 (InferenceServer::ModelIsReady), an unloaded model is not ready.
    assert not server.model("identity_fp32").ready()
    assert server.models()[("identity_fp32", 1)].state == "UNAVAILABLE"
    # The server stays ready (strict readiness) and serves the other models.
    assert server.ready()
    a, b = add_sub_inputs()
    (response,) = list(server.model("add_sub").infer(inputs={"INPUT0": a, "INPUT1": b}))
    np.testing.assert_array_equal(as_numpy(response.outputs["OUTPUT0"]), a + b)
    with pytest.raises(tritonserver.TritonError):
        list(server.model("identity_fp32").infer(inputs={"INPUT0": x}))

    # Loaded again, it serves again.
    assert server.load("identity_fp32").ready()
    (response,) = list(server.model("identity_fp32").infer(inputs={"INPUT0": x}))
    np.testing.assert_array_equal(as_numpy(response.outputs["OUTPUT0"]), x)
    server.unload("identity_fp32", wait_until_unloaded=True, timeout=60)
    assert server.ready()

    with pytest.raises(tritonserver.TritonError):
        server.load("no_such_model")
    assert server.ready()


def test_model_metadata_and_config(server, tritonserver):
    model = server.model("add_sub")
    metadata = model.metadata()
    assert metadata["name"] == "add_sub"
    assert metadata["versions"] == ["1"]
    assert metadata["platform"] == "onnxruntime_onnx"
    assert metadata["inputs"] == [
        {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [-1, 4]},
    ]
    assert [o["name"] for o in metadata["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    assert all(o["datatype"] == "FP32" and o["shape"] == [-1, 4] for o in metadata["outputs"])

    config = model.config()
    assert config["name"] == "add_sub"
    assert config["max_batch_size"] == 8
    assert config["platform"] == "onnxruntime_onnx"
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("INPUT0", "TYPE_FP32", [4]), ("INPUT1", "TYPE_FP32", [4])]
    assert [(o["name"], o["data_type"], o["dims"]) for o in config["output"]] == [
        ("OUTPUT0", "TYPE_FP32", [4]), ("OUTPUT1", "TYPE_FP32", [4])]

    assert model.batch_properties() == tritonserver.ModelBatchFlag.FIRST_DIM
    assert model.transaction_properties() == tritonserver.ModelTxnPropertyFlag.ONE_TO_ONE


def test_decoupled_model_properties(stream_model, tritonserver):
    assert stream_model.transaction_properties() == tritonserver.ModelTxnPropertyFlag.DECOUPLED
    assert stream_model.config()["model_transaction_policy"]["decoupled"] is True


def counts(model):
    (stats,) = model.statistics()["model_stats"]
    return stats["inference_count"], stats["inference_stats"]["success"]["count"], stats


def test_statistics(server):
    model = server.model("add_sub")
    inferences, successes, stats = counts(model)
    assert stats["name"] == "add_sub" and stats["version"] == "1"
    a, b = add_sub_inputs(batch=2)
    for _ in range(3):
        list(model.infer(inputs={"INPUT0": a, "INPUT1": b}))
    after_inferences, after_successes, stats = counts(model)
    assert after_successes - successes == 3
    assert after_inferences - inferences == 6  # batch 2, three times
    assert stats["last_inference"] > 0
    assert stats["inference_stats"]["success"]["ns"] > 0
    assert stats["inference_stats"]["compute_infer"]["count"] >= after_successes
    assert any(b["batch_size"] == 2 for b in stats["batch_stats"])


def test_metrics_text(server):
    a, b = add_sub_inputs()
    list(server.model("add_sub").infer(inputs={"INPUT0": a, "INPUT1": b}))
    text = server.metrics()
    assert "# TYPE nv_inference_request_success counter" in text
    match = re.search(r'^nv_inference_request_success\{model="add_sub",version="1"\} (\d+)', text, re.M)
    assert match, text[:2000]
    assert int(match.group(1)) >= 1
    match = re.search(r'^nv_inference_count\{model="add_sub",version="1"\} (\d+)', text, re.M)
    assert match and int(match.group(1)) >= 1


def stream_inputs(n, delay_ms=None):
    inputs = {"N": np.array([n], dtype=np.int32)}
    if delay_ms is not None:
        inputs["DELAY_MS"] = np.array([delay_ms], dtype=np.int32)
    return inputs


def test_decoupled_streaming(stream_model):
    responses = list(stream_model.infer(inputs=stream_inputs(5)))
    values = [int(as_numpy(r.outputs["OUT"])[0]) for r in responses if "OUT" in r.outputs]
    assert values == [0, 1, 2, 3, 4]
    assert all(r.error is None for r in responses)
    assert [r.final for r in responses] == [False] * 5 + [True]
    assert responses[-1].outputs == {}


def test_decoupled_streaming_async(stream_model):
    async def collect(n):
        return [r async for r in stream_model.async_infer(inputs=stream_inputs(n, delay_ms=5))]

    async def both():
        return await asyncio.gather(collect(3), collect(4))

    for n, responses in zip((3, 4), asyncio.run(both())):
        values = [int(as_numpy(r.outputs["OUT"])[0]) for r in responses if "OUT" in r.outputs]
        assert values == list(range(n))
        assert responses[-1].final


def test_cancel_in_flight_request(stream_model):
    """A decoupled request cancelled after two responses stops long before its 200th:
    the model sees the cancellation (request.is_cancelled()) and ends the stream."""
    started = time.monotonic()
    responses = stream_model.infer(inputs=stream_inputs(200, delay_ms=20), raise_on_error=False)
    received = []
    for response in responses:
        received.append(response)
        if len(received) == 2:
            responses.cancel()
    elapsed = time.monotonic() - started
    values = [int(as_numpy(r.outputs["OUT"])[0]) for r in received if "OUT" in r.outputs]
    assert values == list(range(len(values)))
    assert 2 <= len(values) < 50, f"{len(values)} responses after the cancellation"
    assert elapsed < 2.0 + 200 * 0.02 / 2
    last = received[-1]
    assert last.final
    assert last.error is not None and "cancel" in str(last.error).lower(), last.error
    # The model's instance is free again.
    again = list(stream_model.infer(inputs=stream_inputs(2)))
    assert [int(as_numpy(r.outputs["OUT"])[0]) for r in again if "OUT" in r.outputs] == [0, 1]


def test_cancel_queued_request(server):
    """A request cancelled while it waits in the dynamic batcher's queue ends with a
    CANCELLED error, as in Triton (no python backend needed)."""
    model = server.load("add_sub_queued")
    a, b = add_sub_inputs()
    started = time.monotonic()
    responses = model.infer(inputs={"INPUT0": a, "INPUT1": b}, raise_on_error=False)
    responses.cancel()
    received = list(responses)
    assert time.monotonic() - started < 5
    assert len(received) == 1 and received[0].final
    assert received[0].error is not None, "the cancelled request was executed"
    assert "cancel" in str(received[0].error).lower(), received[0].error
    # An uncancelled one is served after the queue delay.
    (response,) = list(model.infer(inputs={"INPUT0": a, "INPUT1": b}))
    np.testing.assert_array_equal(as_numpy(response.outputs["OUTPUT0"]), a + b)


LOG_CHILD = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import tritonserver
    records = []
    def callback(level, filename, line, timestamp, message):
        records.append([str(level), filename, line, timestamp, message])
    server = tritonserver.Server(tritonserver.Options(
        server_id="log-callback", model_repository=sys.argv[1], log_info=True,
        model_control_mode=tritonserver.ModelControlMode.EXPLICIT, log_callback=callback))
    server.start(wait_until_ready=True, timeout=60)
    server.load("add_sub")
    a = np.ones((1, 4), dtype=np.float32)
    list(server.model("add_sub").infer(inputs={"INPUT0": a, "INPUT1": a}))
    server.unload("add_sub", wait_until_unloaded=True, timeout=60)
    server.stop()
    time.sleep(0.2)
    print(json.dumps({"now_us": int(time.time() * 1e6), "records": records}))
""")


def test_log_callback_receives_records(tritonserver, tmp_path):
    """`Options(log_callback=...)` gets each log record as (level, filename, line,
    timestamp, message), and the records do not go to stderr."""
    require_onnxruntime()
    repo = write_repository(tmp_path / "models", ["add_sub"])
    result = subprocess.run([sys.executable, "-c", LOG_CHILD, repo], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    records = out["records"]
    assert records, "the log callback received no record"
    for level, filename, line, timestamp, message in records:
        assert level.split(".")[-1] in ("INFO", "WARN", "ERROR", "VERBOSE"), level
        assert isinstance(filename, str) and filename
        assert isinstance(line, int) and line >= 0
        assert isinstance(timestamp, int) and 0 < out["now_us"] - timestamp < 600 * 1e6, (timestamp, out["now_us"])
        assert isinstance(message, str) and message
    assert any(level.endswith("INFO") for level, *_ in records)
    # Triton logs the model's load and unload at INFO ("successfully loaded 'add_sub'").
    texts = [message for *_, message in records]
    assert any("add_sub" in message and "load" in message.lower() for message in texts), texts
    # With a callback the records are not also written to stderr.
    assert not any(message in result.stderr for message in texts if len(message) > 20), result.stderr[-2000:]


STDERR_CHILD = textwrap.dedent("""
    import sys
    import tritonserver
    server = tritonserver.Server(tritonserver.Options(
        server_id="log-stderr", model_repository=sys.argv[1], log_info=True,
        model_control_mode=tritonserver.ModelControlMode.EXPLICIT))
    server.start(wait_until_ready=True, timeout=60)
    server.load("add_sub")
    server.unload("add_sub", wait_until_unloaded=True, timeout=60)
    server.stop()
""")


def test_log_records_go_to_stderr_without_callback(tritonserver, tmp_path):
    """Without a callback, `log_info=True` records reach stderr in Triton's default format
    (`I1128 17:10:55.541674 28979 file:line] message`), as the package documents."""
    require_onnxruntime()
    repo = write_repository(tmp_path / "models", ["add_sub"])
    result = subprocess.run([sys.executable, "-c", STDERR_CHILD, repo], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines()
             if re.match(r"^I\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ \S+:\d+\] ", line)]
    assert any("add_sub" in line for line in lines), result.stderr[-3000:]
