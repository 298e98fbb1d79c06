"""Custom batching strategies: a model's own library of TRITONBACKEND_ModelBatch*
functions decides which queued requests join a batch, as in Triton. The library is
crates/triton-abi/tests/backend/volume_strategy.c (the rule of Triton's volume_batching
example), built here with `cc` against the ABI, named by TRITON_BATCH_STRATEGY_PATH or
found as batchstrategy.so in the model's directory, and served beside the native ONNX
add_sub. TRITONSERVER_DELAY_SCHEDULER=4 holds each batcher until four requests wait, so
the batches are the strategy's alone.
"""

import os
import queue
import shutil
import subprocess

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from conftest import REPO_ROOT, add_sub_config

SOURCE = os.path.join(REPO_ROOT, "crates", "triton-abi", "tests", "backend", "volume_strategy.c")
# add_sub's two FP32 [1, 4] inputs: 32 bytes a request.
REQUEST_BYTES = 32


def build(target, *flags):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the test batching library")
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", *flags, "-o", str(target),
                    SOURCE], check=True)
    return target


def parameters(volume=None, path=None):
    text = ""
    if volume is not None:
        text += f'parameters {{ key: "MAX_BATCH_VOLUME_BYTES" value {{ string_value: "{volume}" }} }}\n'
    if path is not None:
        text += f'parameters {{ key: "TRITON_BATCH_STRATEGY_PATH" value {{ string_value: "{path}" }} }}\n'
    return text


@pytest.fixture(scope="module")
def strategy_server(tmp_path_factory):
    from conftest import EXAMPLE_MODELS, Server, base_args

    libraries = tmp_path_factory.mktemp("strategies")
    volume = build(libraries / "volume.so")
    partial = build(libraries / "partial.so", "-DPARTIAL")
    configs = {
        # Two requests' bytes: batches of two.
        "named": parameters(2 * REQUEST_BYTES, volume),
        # batchstrategy.so in the model directory, one request's bytes: batches of one.
        "found": parameters(REQUEST_BYTES),
        "partial": parameters(64, partial),
        "missing": parameters(64, libraries / "nowhere.so"),
        "no_volume": parameters(path=volume),
    }
    root = tmp_path_factory.mktemp("strategy_models")
    for name, extra in configs.items():
        shutil.copytree(os.path.join(EXAMPLE_MODELS, "add_sub", "1"), root / name / "1")
        (root / name / "config.pbtxt").write_text(
            add_sub_config(name=name, extra="dynamic_batching { }\n" + extra))
    shutil.copy(volume, root / "found" / "batchstrategy.so")
    srv = Server(str(root), base_args(str(root), ["--exit-on-error=false", "--model-control-mode=explicit",
                                                 "--load-model=*"]),
                 env={"TRITONSERVER_DELAY_SCHEDULER": "4"})
    try:
        srv.wait_started(timeout=60)
        yield srv
    finally:
        srv.kill()


def send_four(srv, model):
    client = srv.grpc_client()
    done = queue.Queue()
    for i in range(4):
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = grpcclient.InferInput(name, [1, 4], "FP32")
            tensor.set_data_from_numpy(np.full((1, 4), float(i), np.float32))
            inputs.append(tensor)
        client.async_infer(model, inputs, lambda result, error: done.put((result, error)),
                           request_id=f"{model}-{i}")
    sums = []
    for _ in range(4):
        result, error = done.get(timeout=20)
        assert error is None, error
        sums.append(float(result.as_numpy("OUTPUT0")[0, 0]))
    assert sorted(sums) == [0.0, 2.0, 4.0, 6.0]
    with srv.http_client() as http:
        stats = http.get_inference_statistics(model)["model_stats"][0]
    return {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}


def test_a_named_library_cuts_batches_by_its_rule(strategy_server):
    # Without the library the four held requests would run as one batch of four.
    assert send_four(strategy_server, "named") == {2: 2}
    log = strategy_server.log()
    assert f"volume: batcher for named holds {2 * REQUEST_BYTES} bytes" in log
    # The third request of a batch is asked and told to wait (which one is third
    # depends on arrival order).
    assert any(f"of {REQUEST_BYTES} bytes waits" in line and "'named-" in line
               for line in log.splitlines())
    assert "Loading custom batching strategy library" in log


def test_batchstrategy_so_beside_the_model_is_found(strategy_server):
    assert send_four(strategy_server, "found") == {1: 4}
    assert f"volume: batcher for found holds {REQUEST_BYTES} bytes" in strategy_server.log()


def test_broken_libraries_fail_their_model_alone(strategy_server):
    with strategy_server.http_client() as http:
        index = {m["name"]: m for m in http.get_model_repository_index()}
    assert index["named"]["state"] == "READY"
    reasons = {name: index[name]["reason"] for name in ("partial", "missing", "no_volume")}
    assert all(index[name]["state"] == "UNAVAILABLE" for name in reasons)
    assert "does not define all required custom batching functions for model partial" in reasons["partial"]
    assert "Batching library path not found: " in reasons["missing"]
    assert "Unable to find MAX_BATCH_VOLUME_BYTES parameter in model config" in reasons["no_volume"]


def test_unloading_finalizes_the_batcher(strategy_server):
    with strategy_server.http_client() as http:
        before = strategy_server.log().count("volume: batcher finalized")
        http.unload_model("named")
        http.load_model("named")
        assert http.is_model_ready("named")
    assert strategy_server.log().count("volume: batcher finalized") == before + 1
