"""Inference over every front end: HTTP (binary and JSON), gRPC, asyncio HTTP and
gRPC, gRPC streaming; every datatype through the identity models; the MLP
against numpy."""

import asyncio
import json
import os
import queue

import grpc
import ml_dtypes
import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from onnx import numpy_helper
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException, deserialize_bytes_tensor, serialize_byte_tensor

MLP_ONNX = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "models", "mlp", "1", "model.onnx"
)


def add_sub_data(batch):
    a = (np.arange(batch * 4, dtype=np.float32).reshape(batch, 4) * 0.5) - 3.0
    b = np.linspace(-1.0, 1.0, batch * 4, dtype=np.float32).reshape(batch, 4)
    return a, b


def check_add_sub(result, a, b):
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.as_numpy("OUTPUT0").dtype == np.float32


@pytest.mark.parametrize("batch", [1, 8])
def test_add_sub_http_binary(http_client, add_sub_io, batch):
    a, b = add_sub_data(batch)
    # No `outputs`: the client asks for binary_data_output and gets all outputs.
    result = http_client.infer("add_sub", add_sub_io(httpclient, a, b))
    check_add_sub(result, a, b)
    resp = result.get_response()
    assert resp["model_name"] == "add_sub"
    assert resp["model_version"] == "1"
    assert "id" not in resp
    assert [(o["name"], o["datatype"], o["shape"]) for o in resp["outputs"]] == [
        ("OUTPUT0", "FP32", [batch, 4]),
        ("OUTPUT1", "FP32", [batch, 4]),
    ]
    for out in resp["outputs"]:
        assert out["parameters"] == {"binary_data_size": batch * 16}
        assert "data" not in out


@pytest.mark.parametrize("batch", [1, 8])
def test_add_sub_http_json(http_client, add_sub_io, batch):
    a, b = add_sub_data(batch)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=False),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
    ]
    result = http_client.infer(
        "add_sub", add_sub_io(httpclient, a, b, binary=False), outputs=outputs
    )
    check_add_sub(result, a, b)
    resp = result.get_response()
    # JSON numbers; compared in float32 since the server may print the shortest
    # decimal that round-trips in float32.
    assert [o["name"] for o in resp["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    for out, want in zip(resp["outputs"], (a + b, a - b)):
        assert "parameters" not in out or "binary_data_size" not in out["parameters"]
        np.testing.assert_array_equal(np.array(out["data"], dtype=np.float32).reshape(batch, 4), want)


@pytest.mark.parametrize("batch", [1, 8])
def test_add_sub_grpc(grpc_client, add_sub_io, batch):
    a, b = add_sub_data(batch)
    result = grpc_client.infer("add_sub", add_sub_io(grpcclient, a, b))
    check_add_sub(result, a, b)
    resp = result.get_response()
    assert (resp.model_name, resp.model_version, resp.id) == ("add_sub", "1", "")
    assert [(o.name, o.datatype, list(o.shape)) for o in resp.outputs] == [
        ("OUTPUT0", "FP32", [batch, 4]),
        ("OUTPUT1", "FP32", [batch, 4]),
    ]
    # Triton answers with raw_output_contents, one entry per output.
    assert [len(c) for c in resp.raw_output_contents] == [batch * 16, batch * 16]


def test_add_sub_http_aio(server, add_sub_io):
    async def run():
        async with httpaio.InferenceServerClient(server.http_url) as client:
            assert await client.is_server_live()
            assert await client.is_model_ready("add_sub")
            results = []
            for batch in (1, 8):
                a, b = add_sub_data(batch)
                results.append((await client.infer("add_sub", add_sub_io(httpaio, a, b)), a, b))
            return results

    for result, a, b in asyncio.run(run()):
        check_add_sub(result, a, b)


def test_add_sub_grpc_aio(server, add_sub_io):
    async def run():
        async with grpcaio.InferenceServerClient(server.grpc_url) as client:
            assert await client.is_server_live()
            assert await client.is_model_ready("add_sub")
            jobs = []
            for batch in (1, 8):
                a, b = add_sub_data(batch)
                jobs.append((client.infer("add_sub", add_sub_io(grpcaio, a, b)), a, b))
            # Two requests in flight on one channel.
            results = await asyncio.gather(*(job for job, _, _ in jobs))
            return [(r, a, b) for r, (_, a, b) in zip(results, jobs)]

    for result, a, b in asyncio.run(run()):
        check_add_sub(result, a, b)


def test_add_sub_grpc_aio_stream(server, add_sub_io):
    batches = {"s1": 1, "s8": 8, "s2": 2}

    async def requests():
        for rid, batch in batches.items():
            a, b = add_sub_data(batch)
            yield {"model_name": "add_sub", "inputs": add_sub_io(grpcaio, a, b), "request_id": rid}

    async def run():
        async with grpcaio.InferenceServerClient(server.grpc_url) as client:
            got = {}
            async for result, error in client.stream_infer(requests()):
                assert error is None, error
                got[result.get_response().id] = result
                if len(got) == len(batches):
                    break
            return got

    got = asyncio.run(run())
    assert set(got) == set(batches)
    for rid, batch in batches.items():
        a, b = add_sub_data(batch)
        check_add_sub(got[rid], a, b)


def test_add_sub_grpc_stream(grpc_client, add_sub_io):
    responses = queue.Queue()
    grpc_client.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        sent = {"s1": 1, "s8": 8, "bad": 9, "s2": 2}
        for rid, batch in sent.items():
            a, b = add_sub_data(batch)
            grpc_client.async_stream_infer("add_sub", add_sub_io(grpcclient, a, b), request_id=rid)
        results, errors = {}, []
        for _ in sent:
            result, error = responses.get(timeout=20)
            if error is not None:
                errors.append(error)
            else:
                results[result.get_response().id] = result
    finally:
        grpc_client.stop_stream()
    # The error travels in-stream (error_message), so it has no gRPC status, and
    # the stream stays open for the requests after it.
    assert [(e.status(), e.message()) for e in errors] == [
        (None, "[request id: bad] inference request batch-size must be <= 8 for 'add_sub'")
    ]
    assert set(results) == {"s1", "s8", "s2"}
    for rid in results:
        a, b = add_sub_data(sent[rid])
        check_add_sub(results[rid], a, b)


def test_requested_output_only_output1(http_client, grpc_client, add_sub_io):
    a, b = add_sub_data(2)
    for binary in (True, False):
        result = http_client.infer(
            "add_sub",
            add_sub_io(httpclient, a, b),
            outputs=[httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary)],
        )
        assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
        assert result.as_numpy("OUTPUT0") is None
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)

    result = grpc_client.infer(
        "add_sub",
        add_sub_io(grpcclient, a, b),
        outputs=[grpcclient.InferRequestedOutput("OUTPUT1")],
    )
    resp = result.get_response()
    assert [o.name for o in resp.outputs] == ["OUTPUT1"]
    assert len(resp.raw_output_contents) == 1
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_request_id_echo(server, http_client, grpc_client, add_sub_io):
    a, b = add_sub_data(1)
    result = http_client.infer("add_sub", add_sub_io(httpclient, a, b), request_id="req-42")
    assert result.get_response()["id"] == "req-42"
    result = grpc_client.infer("add_sub", add_sub_io(grpcclient, a, b), request_id="req-43")
    assert result.get_response().id == "req-43"
    # Plain JSON: "id" echoed only when sent.
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
            {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32", "data": [[1, 1, 1, 1]]},
        ]
    }
    resp = server.request("POST", "/v2/models/add_sub/infer", body)
    assert resp.status == 200, resp
    assert "id" not in resp.json()
    resp = server.request("POST", "/v2/models/add_sub/infer", dict(body, id="x1"))
    assert resp.json() == {
        "id": "x1",
        "model_name": "add_sub",
        "model_version": "1",
        "outputs": [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 4], "data": [2.0, 3.0, 4.0, 5.0]},
            {"name": "OUTPUT1", "datatype": "FP32", "shape": [1, 4], "data": [0.0, 1.0, 2.0, 3.0]},
        ],
    }


# ---------------------------------------------------------------------------
# Every datatype through identity_<type> (dims [-1], max_batch_size 8).

BF16 = ml_dtypes.bfloat16
# suffix -> (Triton datatype, numpy dtype, four values exercising the range)
IDENTITY = {
    "bool": ("BOOL", np.bool_, [True, False, False, True]),
    "uint8": ("UINT8", np.uint8, [0, 1, 254, 255]),
    "uint16": ("UINT16", np.uint16, [0, 1, 65534, 65535]),
    "uint32": ("UINT32", np.uint32, [0, 1, 2**32 - 2, 2**32 - 1]),
    "uint64": ("UINT64", np.uint64, [0, 1, 2**63, 2**64 - 1]),
    "int8": ("INT8", np.int8, [-128, -1, 0, 127]),
    "int16": ("INT16", np.int16, [-32768, -1, 0, 32767]),
    "int32": ("INT32", np.int32, [-(2**31), -1, 0, 2**31 - 1]),
    "int64": ("INT64", np.int64, [-(2**63), -1, 0, 2**63 - 1]),
    "fp16": ("FP16", np.float16, [-2.5, 0.0, 1.0 + 2**-10, 65504.0]),
    "fp32": ("FP32", np.float32, [-2.5, 0.0, 1.0 + 2**-23, 3.4028234663852886e38]),
    "fp64": ("FP64", np.float64, [-2.5, 0.0, 1.0 + 2**-52, 1e300]),
    "bf16": ("BF16", BF16, [-2.5, 0.0, 1.0 + 2**-7, 3.3895313892515355e38]),
    "string": ("BYTES", np.object_, [b"hello", b"", "h\u00e9llo w\u00f6rld \u2713".encode(), b"x" * 300]),
}
IDENTITY_SHAPE = [2, 2]  # batch 2 of two elements


def identity_array(suffix):
    _, dtype, values = IDENTITY[suffix]
    return np.array(values, dtype=dtype).reshape(IDENTITY_SHAPE)


def assert_same_tensor(got, want):
    assert got is not None
    assert got.shape == want.shape
    if want.dtype == np.object_:
        assert got.dtype == np.object_
        assert got.tolist() == want.tolist()
    else:
        assert got.dtype == want.dtype
        # Compare the bytes: exact for floats (no NaN here) and for BF16.
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("suffix", list(IDENTITY))
def test_identity_http_binary(http_client, suffix):
    datatype = IDENTITY[suffix][0]
    data = identity_array(suffix)
    inp = httpclient.InferInput("INPUT0", IDENTITY_SHAPE, datatype)
    inp.set_data_from_numpy(data, binary_data=True)
    result = http_client.infer(
        "identity_" + suffix,
        [inp],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)],
    )
    out = result.get_response()["outputs"][0]
    assert (out["name"], out["datatype"], out["shape"]) == ("OUTPUT0", datatype, IDENTITY_SHAPE)
    assert_same_tensor(result.as_numpy("OUTPUT0"), data)


@pytest.mark.parametrize("suffix", list(IDENTITY))
def test_identity_grpc(grpc_client, suffix):
    datatype = IDENTITY[suffix][0]
    data = identity_array(suffix)
    inp = grpcclient.InferInput("INPUT0", IDENTITY_SHAPE, datatype)
    inp.set_data_from_numpy(data)
    result = grpc_client.infer("identity_" + suffix, [inp])
    out = result.get_response().outputs[0]
    assert (out.name, out.datatype, list(out.shape)) == ("OUTPUT0", datatype, IDENTITY_SHAPE)
    assert_same_tensor(result.as_numpy("OUTPUT0"), data)


def json_values(suffix):
    datatype, _, values = IDENTITY[suffix]
    if datatype == "BYTES":
        return [v.decode("utf-8") for v in values]
    return values


@pytest.mark.parametrize("suffix", list(IDENTITY))
def test_identity_http_json(server, suffix):
    # Plain JSON in and out, numbers as JSON numbers. Triton refuses FP16 and
    # BF16 in JSON ("receiving FP16 data via JSON is not supported..."); Nereid
    # accepts them (a deliberate extension) and answers with JSON numbers too.
    datatype, dtype, _ = IDENTITY[suffix]
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": IDENTITY_SHAPE, "datatype": datatype, "data": json_values(suffix)}
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}],
    }
    resp = server.request("POST", f"/v2/models/identity_{suffix}/infer", body)
    assert resp.status == 200, resp
    assert resp.headers["content-type"].startswith("application/json")
    out = resp.json()["outputs"][0]
    assert (out["name"], out["datatype"], out["shape"]) == ("OUTPUT0", datatype, IDENTITY_SHAPE)
    # The response data is flat; no numpy here, which would turn 2**64-1 into a float.
    data = out["data"]
    if datatype == "BYTES":
        assert data == json_values(suffix)
    elif datatype == "BOOL":
        assert data == json_values(suffix)
        assert all(isinstance(v, bool) for v in data)
    elif datatype.startswith(("FP", "BF")):
        # The server may print the shortest decimal that round-trips in the
        # tensor's own precision: compare after converting back to it.
        got = np.array(out["data"], dtype=np.float64).astype(dtype).flatten()
        assert got.tobytes() == identity_array(suffix).flatten().tobytes()
    else:
        # Integers must be exact JSON integers, including 2**64-1 and -2**63
        # (Triton 2.51 answers 18446744073709551616 for 2**64-1; exact is right).
        assert [int(v) for v in data] == json_values(suffix)
        assert all(isinstance(v, int) and not isinstance(v, bool) for v in data)


def test_bytes_strings_all_frontends(server, http_client, grpc_client):
    # Empty and non-ASCII elements round-trip byte-exactly, and so do elements
    # that are not UTF-8 or hold NUL (test_bytes.py covers every path).
    strings = [b"first", b"", "\u00e9t\u00e9 \u65e5\u672c \U0001f600".encode()]
    data = np.array(strings, dtype=np.object_).reshape(1, 3)

    inp = httpclient.InferInput("INPUT0", [1, 3], "BYTES")
    inp.set_data_from_numpy(data, binary_data=True)
    result = http_client.infer("identity_string", [inp])
    assert result.as_numpy("OUTPUT0").tolist() == [strings]

    inp = grpcclient.InferInput("INPUT0", [1, 3], "BYTES")
    inp.set_data_from_numpy(data)
    result = grpc_client.infer("identity_string", [inp])
    assert result.as_numpy("OUTPUT0").tolist() == [strings]

    binary = [b"ok", b"\xff\xfe binary\x00"]
    for client, module in ((http_client, httpclient), (grpc_client, grpcclient)):
        inp = module.InferInput("INPUT0", [1, 2], "BYTES")
        inp.set_data_from_numpy(np.array([binary], dtype=np.object_))
        result = client.infer("identity_string", [inp])
        assert result.as_numpy("OUTPUT0").tolist() == [binary]

    # JSON carries only UTF-8 text.
    text = [s.decode() for s in strings[:3]]
    resp = server.request(
        "POST",
        "/v2/models/identity_string/infer",
        {"inputs": [{"name": "INPUT0", "shape": [1, 3], "datatype": "BYTES", "data": text}]},
    )
    assert resp.status == 200, resp
    assert resp.json()["outputs"][0]["data"] == text

    # Binary output of BYTES: 4-byte little-endian length + bytes per element.
    hdr = json.dumps(
        {
            "inputs": [{"name": "INPUT0", "shape": [1, 3], "datatype": "BYTES", "data": text}],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    resp = server.request("POST", "/v2/models/identity_string/infer", hdr)
    assert resp.status == 200, resp
    json_len = int(resp.headers["inference-header-content-length"])
    tail = resp.body[json_len:]
    want = b"".join(len(s.encode()).to_bytes(4, "little") + s.encode() for s in text)
    assert tail == want
    assert json.loads(resp.body[:json_len])["outputs"][0]["parameters"] == {"binary_data_size": len(want)}
    assert deserialize_bytes_tensor(tail).tolist() == [s.encode() for s in text]


GRPC_CONTENTS = {
    # Triton datatype -> (typed contents field, numpy dtype, values)
    "BOOL": ("bool_contents", np.bool_, [True, False, True, False]),
    "INT8": ("int_contents", np.int8, [-128, -1, 0, 127]),
    "INT16": ("int_contents", np.int16, [-32768, -1, 0, 32767]),
    "INT32": ("int_contents", np.int32, [-(2**31), -1, 0, 2**31 - 1]),
    "INT64": ("int64_contents", np.int64, [-(2**63), -1, 0, 2**63 - 1]),
    "UINT8": ("uint_contents", np.uint8, [0, 1, 254, 255]),
    "UINT16": ("uint_contents", np.uint16, [0, 1, 65534, 65535]),
    "UINT32": ("uint_contents", np.uint32, [0, 1, 2**32 - 2, 2**32 - 1]),
    "UINT64": ("uint64_contents", np.uint64, [0, 1, 2**63, 2**64 - 1]),
    "FP32": ("fp32_contents", np.float32, [-2.5, 0.0, 1.0 + 2**-23, 3.4028234663852886e38]),
    "FP64": ("fp64_contents", np.float64, [-2.5, 0.0, 1.0 + 2**-52, 1e300]),
    "BYTES": ("bytes_contents", np.object_, [b"a", b"", "\u00e9".encode(), b"longer string"]),
}
TRITON_TO_SUFFIX = {v[0]: k for k, v in IDENTITY.items()}


@pytest.mark.parametrize("datatype", list(GRPC_CONTENTS))
def test_grpc_typed_contents(server, datatype):
    # The typed `contents` fields instead of raw_input_contents; the reply still
    # uses raw_output_contents.
    field, dtype, values = GRPC_CONTENTS[datatype]
    model = "identity_" + TRITON_TO_SUFFIX[datatype]
    req = service_pb2.ModelInferRequest(model_name=model)
    tensor = req.inputs.add(name="INPUT0", datatype=datatype, shape=[1, 4])
    getattr(tensor.contents, field).extend(values)
    with grpc.insecure_channel(server.grpc_url) as channel:
        resp = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(req, timeout=20)
    assert [(o.name, o.datatype, list(o.shape)) for o in resp.outputs] == [("OUTPUT0", datatype, [1, 4])]
    assert len(resp.raw_output_contents) == 1
    raw = resp.raw_output_contents[0]
    if datatype == "BYTES":
        assert deserialize_bytes_tensor(raw).tolist() == values
    else:
        assert raw == np.array(values, dtype=dtype).tobytes()


def mlp_reference(x):
    model = onnx.load(MLP_ONNX)
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    hidden = np.maximum(x.astype(np.float64) @ w["w1"] + w["b1"], 0.0)
    return hidden @ w["w2"] + w["b2"]


@pytest.mark.parametrize("batch", [1, 64])
def test_mlp_matches_numpy(http_client, grpc_client, batch):
    x = np.random.RandomState(batch).standard_normal((batch, 16)).astype(np.float32)
    want = mlp_reference(x)

    inp = httpclient.InferInput("INPUT", [batch, 16], "FP32")
    inp.set_data_from_numpy(x)
    got = http_client.infer("mlp", [inp]).as_numpy("OUTPUT")
    assert got.shape == (batch, 4) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)

    inp = grpcclient.InferInput("INPUT", [batch, 16], "FP32")
    inp.set_data_from_numpy(x)
    got = grpc_client.infer("mlp", [inp]).as_numpy("OUTPUT")
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
