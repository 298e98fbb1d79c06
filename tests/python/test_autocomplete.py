"""Auto-completed configuration for a model without config.pbtxt.

What Triton does for `add_sub_noconfig` (an ONNX file with [batch, 4] inputs
and outputs whose first dim is symbolic, no config.pbtxt):

- core (model_config_utils.cc AutoCompleteBackendFields): `model.onnx` in the
  version directory gives backend "onnxruntime", platform "onnxruntime_onnx",
  default_model_filename "model.onnx"; the name is the directory name.
- onnxruntime_backend (src/onnxruntime.cc AutoCompleteMaxBatch): every input
  and output has a variable first dim, so batching is possible; with
  max_batch_size 0 in the (empty) config it is set to the backend config
  `default-max-batch-size`, which core (backend_model.cc
  backend_config_defaults) defaults to **4**. Because max_batch_size > 1 and no
  scheduler is configured, it also adds `dynamic_batching {}`; normalization
  then sets preferred_batch_size [4].
- AutoCompleteIO drops the batch dim: dims [4], data_type from the ONNX type.
  Inputs/outputs come from an unordered map, so their order is not fixed.
- No instance_group: one group named after the model, KIND_CPU, count 2 (the
  onnxruntime CPU default).
- `--strict-model-config=true` (or `--disable-auto-complete-config`) turns all
  of that off; the missing config.pbtxt is then a load failure.
"""

import numpy as np
import pytest
import tritonclient.http as httpclient


def test_noconfig_autocompleted(http_client, grpc_client):
    cfg = http_client.get_model_config("add_sub_noconfig")
    assert cfg["name"] == "add_sub_noconfig"
    assert cfg["platform"] == "onnxruntime_onnx"
    assert cfg["backend"] == "onnxruntime"
    assert cfg["default_model_filename"] == "model.onnx"
    assert cfg["max_batch_size"] == 4
    ins = sorted((i["name"], i["data_type"], i["dims"]) for i in cfg["input"])
    outs = sorted((o["name"], o["data_type"], o["dims"]) for o in cfg["output"])
    assert ins == [("INPUT0", "TYPE_FP32", [4]), ("INPUT1", "TYPE_FP32", [4])]
    assert outs == [("OUTPUT0", "TYPE_FP32", [4]), ("OUTPUT1", "TYPE_FP32", [4])]
    assert cfg["dynamic_batching"]["preferred_batch_size"] == [4]
    assert cfg["dynamic_batching"]["max_queue_delay_microseconds"] == 0
    group = cfg["instance_group"]
    assert [(g["name"], g["kind"], g["count"]) for g in group] == [("add_sub_noconfig", "KIND_CPU", 2)]
    assert cfg["version_policy"] == {"latest": {"num_versions": 1}}

    gcfg = grpc_client.get_model_config("add_sub_noconfig").config
    assert gcfg.max_batch_size == 4
    assert sorted(i.name for i in gcfg.input) == ["INPUT0", "INPUT1"]
    assert gcfg.WhichOneof("scheduling_choice") == "dynamic_batching"

    meta = http_client.get_model_metadata("add_sub_noconfig")
    assert meta["platform"] == "onnxruntime_onnx"
    assert sorted((t["name"], t["shape"]) for t in meta["inputs"]) == [
        ("INPUT0", [-1, 4]),
        ("INPUT1", [-1, 4]),
    ]


def test_noconfig_serves_up_to_batch_4(http_client, add_sub_io, error_of):
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    b = np.full((4, 4), 0.25, np.float32)
    result = http_client.infer("add_sub_noconfig", add_sub_io(httpclient, a, b))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    big = np.ones((5, 4), np.float32)
    e = error_of(http_client.infer, "add_sub_noconfig", add_sub_io(httpclient, big, big))
    assert (e.status(), e.message()) == (
        "400",
        "[request id: <id_unknown>] inference request batch-size must be <= 4 for 'add_sub_noconfig'",
    )


@pytest.mark.parametrize("flag", ["--strict-model-config=true", "--disable-auto-complete-config"])
def test_strict_config_rejects_noconfig(make_repo, start_server, flag):
    # --exit-on-error=false so the failed model does not stop the server.
    server = start_server(make_repo(["add_sub", "add_sub_noconfig"]), flag, "--exit-on-error=false")
    resp = server.request("POST", "/v2/repository/index")
    assert resp.status == 200, resp
    entries = {e["name"]: e for e in resp.json()}
    assert entries["add_sub"]["state"] == "READY"
    # Triton 2.51 would list it by name only (the config read fails before a
    # version is known); Nereid reports UNAVAILABLE with the reason.
    assert entries["add_sub_noconfig"]["state"] == "UNAVAILABLE"
    assert entries["add_sub_noconfig"]["reason"]
    client = server.http_client()
    try:
        assert not client.is_model_ready("add_sub_noconfig")
        assert client.is_model_ready("add_sub")
    finally:
        client.close()


def test_autofill_refuses_batching_for_a_model_that_cannot_batch(make_repo, start_server):
    # accumulate_fp32's tensors have a fixed first dimension (4): the ONNX Runtime
    # backend's auto-completion (AutoCompleteMaxBatch) refuses a non-zero
    # max_batch_size for it when it completes the outputs (L0_model_config).
    config = 'platform: "onnxruntime_onnx"\ndefault_model_filename: "accumulate_fp32.onnx"\nmax_batch_size: 1\ninput [ { name: "Input" data_type: TYPE_FP32 dims: [ -1, 5 ] } ]\n'
    repo = make_repo(["accumulate_fp32"], {"accumulate_fp32": config})
    server = start_server(repo, "--exit-on-error=false")
    entries = {e["name"]: e for e in server.request("POST", "/v2/repository/index").json()}
    assert entries["accumulate_fp32"]["state"] == "UNAVAILABLE"
    assert entries["accumulate_fp32"]["reason"] == (
        "autofill failed for model 'accumulate_fp32': model does not support batching "
        "while non-zero max_batch_size is specified"
    )
