"""Ragged batching end to end (issue 35, item 3), as Triton's
`docs/user_guide/ragged_batching.md` lays it out: requests of different lengths share
one batch without padding, the model gets their `allow_ragged_batch` input end to end
as one dimension plus every `batch_input` kind describing where each request is, and a
`batch_output` comes back cut into each request's own shape.

The ONNX model echoes each batch input as an output of one row per request, so each
client sees the values the server computed for its batch: its element count, where its
elements start and end in the concatenated input, the longest request (the shape of
BATCH_MAX_ELEMENT_COUNT_AS_SHAPE), its item shape, and its input doubled.
"""

import threading

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from make_models import IR_VERSION, OPSET
from onnx import TensorProto, helper

MODEL = "ragged"

CONFIG = f"""name: "{MODEL}"
backend: "onnxruntime"
max_batch_size: 8
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true }} ]
output [
  {{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }},
  {{ name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "START" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "END" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "MAXLEN" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "SHAPE" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "FLAT" data_type: TYPE_FP32 dims: [ 1 ] }}
]
batch_input [
  {{ kind: BATCH_ELEMENT_COUNT target_name: "COUNT_IN" data_type: TYPE_INT32 source_input: "INPUT" }},
  {{ kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "END_IN" data_type: TYPE_FP32 source_input: "INPUT" }},
  {{ kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: "START0_IN" data_type: TYPE_INT32 source_input: "INPUT" }},
  {{ kind: BATCH_MAX_ELEMENT_COUNT_AS_SHAPE target_name: "MAX_IN" data_type: TYPE_INT32 source_input: "INPUT" }},
  {{ kind: BATCH_ITEM_SHAPE target_name: "SHAPE_IN" data_type: TYPE_INT32 source_input: "INPUT" }},
  {{ kind: BATCH_ITEM_SHAPE_FLATTEN target_name: "FLAT_IN" data_type: TYPE_FP32 source_input: "INPUT" }}
]
batch_output [ {{ target_name: "OUT" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "INPUT" }} ]
dynamic_batching {{ max_queue_delay_microseconds: 100000 }}
"""


def ragged_graph():
    """Every batch input echoed as one row per request (each request has one item)."""
    vi = helper.make_tensor_value_info
    const = helper.make_tensor
    nodes = [
        helper.make_node("Constant", [], ["axes"], value=const("axes", TensorProto.INT64, [1], [1])),
        helper.make_node("Constant", [], ["two"], value=const("two", TensorProto.FLOAT, [], [2.0])),
        helper.make_node("Constant", [], ["zero"], value=const("zero", TensorProto.INT32, [], [0])),
        helper.make_node("Constant", [], ["s0"], value=const("s0", TensorProto.INT64, [1], [0])),
        helper.make_node("Constant", [], ["s1"], value=const("s1", TensorProto.INT64, [1], [-1])),
        helper.make_node("Mul", ["INPUT", "two"], ["OUT"]),
        helper.make_node("Unsqueeze", ["COUNT_IN", "axes"], ["COUNT"]),
        helper.make_node("Unsqueeze", ["END_IN", "axes"], ["END"]),
        helper.make_node("Slice", ["START0_IN", "s0", "s1"], ["starts"]),
        helper.make_node("Unsqueeze", ["starts", "axes"], ["START"]),
        helper.make_node("Shape", ["MAX_IN"], ["max64"]),
        helper.make_node("Cast", ["max64"], ["max32"], to=TensorProto.INT32),
        helper.make_node("Mul", ["COUNT", "zero"], ["zeros"]),
        helper.make_node("Add", ["zeros", "max32"], ["MAXLEN"]),
        helper.make_node("Identity", ["SHAPE_IN"], ["SHAPE"]),
        helper.make_node("Unsqueeze", ["FLAT_IN", "axes"], ["FLAT"]),
    ]
    graph = helper.make_graph(
        nodes,
        MODEL,
        [
            vi("INPUT", TensorProto.FLOAT, [-1]),
            vi("COUNT_IN", TensorProto.INT32, ["r"]),
            vi("END_IN", TensorProto.FLOAT, ["r"]),
            vi("START0_IN", TensorProto.INT32, ["r1"]),
            vi("MAX_IN", TensorProto.INT32, ["m"]),
            vi("SHAPE_IN", TensorProto.INT32, ["r", 1]),
            vi("FLAT_IN", TensorProto.FLOAT, ["r"]),
        ],
        [
            vi("OUT", TensorProto.FLOAT, [-1]),
            vi("COUNT", TensorProto.INT32, ["r", 1]),
            vi("START", TensorProto.INT32, ["r", 1]),
            vi("END", TensorProto.FLOAT, ["r", 1]),
            vi("MAXLEN", TensorProto.INT32, ["r", 1]),
            vi("SHAPE", TensorProto.INT32, ["r", 1]),
            vi("FLAT", TensorProto.FLOAT, ["r", 1]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


@pytest.fixture
def ragged_server(tmp_path, start_server):
    def start(env=None):
        version = tmp_path / "models" / MODEL / "1"
        version.mkdir(parents=True)
        onnx.save(ragged_graph(), str(version / "model.onnx"))
        (version.parent / "config.pbtxt").write_text(CONFIG)
        return start_server(str(tmp_path / "models"), env=env)

    return start


def infer(module, client, values):
    data = np.array([values], dtype=np.float32)
    inp = module.InferInput("INPUT", list(data.shape), "FP32")
    inp.set_data_from_numpy(data)
    result = client.infer(MODEL, [inp])
    return {name: result.as_numpy(name) for name in ("OUT", "COUNT", "START", "END", "MAXLEN", "SHAPE", "FLAT")}


def batch_stats(server):
    with server.http_client() as client:
        stats = client.get_inference_statistics(MODEL)["model_stats"][0]
    return {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_requests_of_different_lengths_share_a_batch_without_padding(ragged_server, protocol):
    # The scheduler holds until all three are queued, so they run as one batch.
    server = ragged_server(env={"TRITONSERVER_DELAY_SCHEDULER": "3"})
    module = httpclient if protocol == "http" else grpcclient
    lengths = {"a": 3, "b": 4, "c": 5}
    results, errors = {}, []

    def send(key):
        client = server.http_client() if protocol == "http" else server.grpc_client()
        try:
            values = [float(10 * lengths[key] + i) for i in range(lengths[key])]
            results[key] = (values, infer(module, client, values))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
        finally:
            client.close()

    threads = [threading.Thread(target=send, args=(k,)) for k in lengths]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    spans = []
    for key, (values, out) in results.items():
        n = lengths[key]
        # The batch output, cut back into this request's own shape.
        assert out["OUT"].shape == (1, n)
        np.testing.assert_array_equal(out["OUT"], np.array([values], np.float32) * 2)
        assert out["COUNT"].tolist() == [[n]]
        start, end = int(out["START"][0, 0]), float(out["END"][0, 0])
        assert end - start == n, (key, start, end)
        spans.append((start, int(end)))
        # BATCH_MAX_ELEMENT_COUNT_AS_SHAPE: the longest request of the batch.
        assert out["MAXLEN"].tolist() == [[5]]
        # BATCH_ITEM_SHAPE: the item's shape without its batch dimension.
        assert out["SHAPE"].tolist() == [[n]]
        assert out["FLAT"].tolist() == [[float(n)]]
    # The requests sit end to end in the concatenated input: 0..12 without gaps.
    spans.sort()
    assert spans[0][0] == 0 and spans[-1][1] == 12
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), spans
    assert batch_stats(server) == {3: 1}


def test_a_lone_request_gets_the_same_layout(ragged_server):
    server = ragged_server()
    with server.http_client() as client:
        out = infer(httpclient, client, [1.0, 2.0])
    assert out["OUT"].tolist() == [[2.0, 4.0]]
    assert out["COUNT"].tolist() == [[2]]
    assert out["START"].tolist() == [[0]] and out["END"].tolist() == [[2.0]]
    assert out["MAXLEN"].tolist() == [[2]]
    assert out["SHAPE"].tolist() == [[2]]


def test_a_batch_input_the_graph_lacks_fails_the_load(tmp_path, start_server):
    version = tmp_path / "models" / MODEL / "1"
    version.mkdir(parents=True)
    onnx.save(ragged_graph(), str(version / "model.onnx"))
    extra = '  { kind: BATCH_ELEMENT_COUNT target_name: "EXTRA" data_type: TYPE_INT32 source_input: "INPUT" },\n'
    (version.parent / "config.pbtxt").write_text(CONFIG.replace("batch_input [\n", "batch_input [\n" + extra))
    server = start_server(str(tmp_path / "models"), "--exit-on-error=false")
    with server.http_client() as client:
        index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index[MODEL]["state"] == "UNAVAILABLE"
    assert "configuration expects 8 inputs, model provides 7" in index[MODEL]["reason"], index[MODEL]
