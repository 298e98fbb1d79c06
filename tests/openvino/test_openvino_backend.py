"""OpenVINO IR models served by Triton's own openvino backend (r24.10, built from source by
scripts/build_openvino_backend.sh against PyPI's openvino 2024.4.0) hosted by the nereid
binary, driven with tritonclient over HTTP and gRPC. The models (tests/openvino/
make_openvino_models.py) compute OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1
on [?, 4] tensors."""

import concurrent.futures
import os
import shutil

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(300)

# One inference thread per model: the tests run beside other work on small machines.
THREADS = 'parameters { key: "INFERENCE_NUM_THREADS" value: { string_value: "1" } }\n'

# Without batching: the model's own [?, 4] shape, any number of rows.
ADD_SUB_TEMPLATE = """backend: "openvino"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: {dtype} dims: [ -1, 4 ] }}, {{ name: "INPUT1" data_type: {dtype} dims: [ -1, 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: {dtype} dims: [ -1, 4 ] }}, {{ name: "OUTPUT1" data_type: {dtype} dims: [ -1, 4 ] }} ]
"""


def add_sub_config(dtype="TYPE_FP32"):
    return ADD_SUB_TEMPLATE.format(dtype=dtype) + THREADS


# With batching: the backend fixes the model's first dimension to max_batch_size, so
# every execution must carry exactly 8 rows unless ENABLE_BATCH_PADDING fills them up.
BATCHED = """backend: "openvino"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
""" + THREADS

PADDED = BATCHED + """parameters { key: "ENABLE_BATCH_PADDING" value: { string_value: "YES" } }
dynamic_batching { max_queue_delay_microseconds: 200000 }
"""

# config data type -> (IR element type of the model file, numpy type, tritonclient name)
TYPES = {"TYPE_FP32": ("f32", np.float32, "FP32"), "TYPE_FP16": ("f16", np.float16, "FP16"),
         "TYPE_INT64": ("i64", np.int64, "INT64"), "TYPE_INT32": ("i32", np.int32, "INT32"),
         "TYPE_INT8": ("i8", np.int8, "INT8"), "TYPE_UINT8": ("u8", np.uint8, "UINT8")}


def model(repo, name, config, ir=None, models=None, file_name="model.xml"):
    """A model folder; ir names the IR (add_sub_<ir>.xml/.bin) copied into version 1."""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    if ir:
        stem = os.path.splitext(file_name)[0]
        shutil.copy(os.path.join(models, f"add_sub_{ir}.xml"), repo / name / "1" / file_name)
        shutil.copy(os.path.join(models, f"add_sub_{ir}.bin"), repo / name / "1" / f"{stem}.bin")


def add_sub_inputs(module, a, b, datatype="FP32"):
    inputs = [module.InferInput("INPUT0", list(a.shape), datatype),
              module.InferInput("INPUT1", list(b.shape), datatype)]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def index_of(client):
    return {m["name"]: m for m in client.get_model_repository_index()}


@pytest.fixture
def served(openvino, tmp_path, start_server):
    backends, models = openvino
    model(tmp_path, "add_sub", add_sub_config(), "f32", models)
    for dtype, (ir, _, _) in TYPES.items():
        model(tmp_path, f"add_sub_{ir}", add_sub_config(dtype), ir, models)
    model(tmp_path, "batched", BATCHED, "f32", models)
    model(tmp_path, "padded", PADDED, "f32", models)
    return start_server(str(tmp_path), "--backend-directory", backends)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_add_sub_over_both_protocols(served, protocol):
    module, client = (httpclient, served.http_client()) if protocol == "http" else (grpcclient, served.grpc_client())
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.full((3, 4), 0.5, np.float32)
    result = client.infer("add_sub", add_sub_inputs(module, a, b))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    # The model's first dimension is dynamic: another row count works on the same model.
    result = client.infer("add_sub", add_sub_inputs(module, a[:1], b[:1]))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a[:1] + b[:1])


def test_add_sub_over_element_types(served):
    client = served.http_client()
    for dtype, (ir, np_type, name) in TYPES.items():
        # b <= a: OpenVINO's CPU plugin saturates unsigned subtraction at 0.
        a = np.array([[10, 20, 30, 40], [1, 2, 3, 4]], dtype=np_type)
        b = np.array([[1, 2, 3, 4], [1, 1, 1, 1]], dtype=np_type)
        result = client.infer(f"add_sub_{ir}", add_sub_inputs(httpclient, a, b, name))
        out0, out1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
        assert out0.dtype == np_type and out1.dtype == np_type, (dtype, out0.dtype, out1.dtype)
        np.testing.assert_array_equal(out0, a + b, err_msg=dtype)
        np.testing.assert_array_equal(out1, a - b, err_msg=dtype)


def test_a_batched_model_takes_full_batches_and_refuses_others(served):
    client = served.http_client()
    a = np.arange(32, dtype=np.float32).reshape(8, 4)
    b = np.full((8, 4), 2, np.float32)
    result = client.infer("batched", add_sub_inputs(httpclient, a, b))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    # Triton's openvino backend runs only max_batch_size rows at once without padding.
    with pytest.raises(InferenceServerException) as error:
        client.infer("batched", add_sub_inputs(httpclient, a[:2], b[:2]))
    assert "expected requests with batch size '8', got '2'" in str(error.value), error.value


def test_padded_requests_are_dynamically_batched(served):
    a = np.ones((1, 4), np.float32)

    def one(i):
        client = served.http_client()
        return client.infer("padded", add_sub_inputs(httpclient, a * i, a)).as_numpy("OUTPUT1")

    # Six requests, fewer rows than max_batch_size, so every execution is padded (a full
    # batch after a padded one fails: see the next test).
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(one, range(6)))
    for i, out in enumerate(results):
        np.testing.assert_array_equal(out, a * i - 1)
    stats = served.http_client().get_inference_statistics("padded")["model_stats"][0]
    assert stats["inference_count"] == 6, stats
    assert stats["execution_count"] < 6, stats


@pytest.mark.xfail(strict=True, raises=InferenceServerException,
                   reason="the r24.10 backend (and its main branch) never resets its padding "
                   "count, so after a padded execution a full batch of max_batch_size rows fails "
                   "('expected batch size of at least 8 in model output, got 3'), as in Triton")
def test_a_full_batch_after_a_padded_one(served):
    client = served.http_client()
    for rows in (3, 8):
        a = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
        b = np.ones((rows, 4), np.float32)
        result = client.infer("padded", add_sub_inputs(httpclient, a, b))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


# The r24.10 backend reads the model again for auto-complete, and there a missing or
# unreadable model.xml throws a C++ exception out of TRITONBACKEND_ModelInitialize (fixed
# upstream after r24.10, openvino_backend PR #100): tritonserver 24.10 dies of it
# (std::terminate in its load thread) and so does nereid. Those load errors are tested
# with auto-complete off, where the backend reports them as errors.
NO_AUTO_COMPLETE = "--disable-auto-complete-config"


def test_a_missing_model_xml_fails_its_load_as_triton_says(openvino, tmp_path, start_server):
    backends, models = openvino
    model(tmp_path, "add_sub", add_sub_config(), "f32", models)
    model(tmp_path, "no_file", add_sub_config())
    srv = start_server(str(tmp_path), "--backend-directory", backends, "--exit-on-error=false",
                       NO_AUTO_COMPLETE)
    client = srv.http_client()
    assert client.is_model_ready("add_sub")
    assert not client.is_model_ready("no_file")
    reason = index_of(client)["no_file"]["reason"]
    expected = f"unable to find '{tmp_path}/no_file/1/model.xml' for model 'no_file'"
    assert expected in reason, reason


def test_an_unreadable_model_xml_fails_its_load_with_openvinos_words(openvino, tmp_path, start_server):
    backends, models = openvino
    model(tmp_path, "broken", add_sub_config())
    (tmp_path / "broken" / "1" / "model.xml").write_text("<net><layers>")
    srv = start_server(str(tmp_path), "--backend-directory", backends, "--exit-on-error=false",
                       NO_AUTO_COMPLETE)
    entry = index_of(srv.http_client())["broken"]
    assert entry["state"] == "UNAVAILABLE", entry
    assert "openvino error in reading model" in entry["reason"], entry


@pytest.mark.xfail(strict=True, raises=pytest.fail.Exception,
                   reason="the r24.10 backend throws a C++ exception out of "
                   "TRITONBACKEND_ModelInitialize for a missing model.xml under auto-complete: "
                   "nereid aborts before listening, as tritonserver 24.10 does")
def test_a_missing_model_xml_under_auto_complete_fails_only_its_load(openvino, tmp_path, start_server):
    backends, models = openvino
    model(tmp_path, "add_sub", add_sub_config(), "f32", models)
    model(tmp_path, "no_file", add_sub_config())
    srv = start_server(str(tmp_path), "--backend-directory", backends, "--exit-on-error=false")
    client = srv.http_client()
    assert client.is_model_ready("add_sub")
    assert "unable to find" in index_of(client)["no_file"]["reason"]


def test_default_model_filename_is_honoured(openvino, tmp_path, start_server):
    backends, models = openvino
    model(tmp_path, "renamed", add_sub_config() + 'default_model_filename: "net.xml"\n',
          "f32", models, file_name="net.xml")
    srv = start_server(str(tmp_path), "--backend-directory", backends)
    a = np.ones((2, 4), np.float32)
    out = srv.http_client().infer("renamed", add_sub_inputs(httpclient, a, a)).as_numpy("OUTPUT1")
    np.testing.assert_array_equal(out, np.zeros((2, 4), np.float32))


def test_a_config_with_more_inputs_than_the_model_fails_its_load(openvino, tmp_path, start_server):
    backends, models = openvino
    config = add_sub_config()
    wrong = config.replace('{ name: "INPUT1" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
                           '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ -1, 4 ] }, '
                           '{ name: "INPUT2" data_type: TYPE_FP32 dims: [ -1, 4 ] }')
    assert wrong != config
    model(tmp_path, "add_sub", config, "f32", models)
    model(tmp_path, "wrong_inputs", wrong, "f32", models)
    srv = start_server(str(tmp_path), "--backend-directory", backends, "--exit-on-error=false")
    client = srv.http_client()
    entry = index_of(client)["wrong_inputs"]
    assert entry["state"] == "UNAVAILABLE", entry
    assert "unable to load model 'wrong_inputs', configuration expects 3 inputs, model provides 2" \
        in entry["reason"], entry
    assert client.is_model_ready("add_sub")


def test_a_bare_config_is_auto_completed_from_the_model(openvino, tmp_path, start_server):
    backends, models = openvino
    model(tmp_path, "bare", 'backend: "openvino"\n' + THREADS, "i32_dynamic", models)
    srv = start_server(str(tmp_path), "--backend-directory", backends)
    client = srv.http_client()
    config = client.get_model_config("bare")
    # The IR has no batch layout, so no batching; inputs and outputs come from the model.
    assert config.get("max_batch_size", 0) == 0, config
    assert sorted((io["name"], io["data_type"], [int(d) for d in io["dims"]]) for io in config["input"]) == \
        [("INPUT0", "TYPE_INT32", [-1, -1]), ("INPUT1", "TYPE_INT32", [-1, -1])], config
    assert sorted((io["name"], io["data_type"]) for io in config["output"]) == \
        [("OUTPUT0", "TYPE_INT32"), ("OUTPUT1", "TYPE_INT32")], config
    a = np.array([[5, 6, 7], [8, 9, 10]], np.int32)
    result = client.infer("bare", add_sub_inputs(httpclient, a, a, "INT32"))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a * 0)


def test_auto_complete_of_a_partly_dynamic_shape_fails_as_in_triton(openvino, tmp_path, start_server):
    # The r24.10 backend writes every dimension of a shape that is not fully static as -1
    # ([?, 4] becomes [-1, -1]) and then rejects its own configuration; Triton does the same.
    backends, models = openvino
    model(tmp_path, "bare", 'backend: "openvino"\n' + THREADS, "f32", models)
    srv = start_server(str(tmp_path), "--backend-directory", backends, "--exit-on-error=false")
    entry = index_of(srv.http_client())["bare"]
    assert entry["state"] == "UNAVAILABLE", entry
    assert "tensor 'INPUT0': the model expects 2 dimensions (shape [-1,4]) but the model " \
        "configuration specifies 2 dimensions (shape [-1,-1])" in entry["reason"], entry
