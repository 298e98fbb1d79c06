"""BYTES elements are arbitrary bytes, end to end.

ONNX string tensors hold `std::string`s, so any bytes fit: Nereid fills and reads
them with explicit lengths. Elements with embedded or trailing NUL, bytes that
are not UTF-8 and empty elements reach the `identity_string` model and come back
exactly, in both directions, over every way of sending tensors: the HTTP binary
body, gRPC `raw_input_contents` and typed `bytes_contents`, and system shared
memory (HTTP and gRPC). Also through the dynamic batcher, the response cache and
an ensemble.

Deliberate difference from Triton: its ONNX Runtime backend hands each element
to ONNX Runtime as a C string, so an element is silently cut at its first NUL.

JSON `data` can only carry text: JSON input is UTF-8 by nature (NUL works as
`\\u0000`), and a BYTES output that is not UTF-8, asked for as JSON, is a 400
that says to ask for binary data (Triton writes the raw bytes into the JSON
string, which its own Python client then fails to parse).
"""

import json
import re
import threading
import uuid

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException, deserialize_bytes_tensor, serialize_byte_tensor

MODEL = "identity_string"

# Every kind of element: NUL inside, alone and trailing (where a C string ends),
# bytes that are not UTF-8, empty, real UTF-8 text, and a large element holding
# every byte value.
ELEMENTS = [
    b"a\x00b",
    b"\xff\xfe",
    b"",
    b"\x00",
    b"trailing\x00",
    b"\x00\x00\xc3\x28",
    "h\u00e9llo \U0001f600".encode(),
    bytes(range(256)) * 512,
]


def tensor(elements=ELEMENTS):
    return np.array([elements], dtype=np.object_)


def exact(got, elements=ELEMENTS):
    """The output equals `elements` byte for byte (shape [1, N])."""
    assert got.shape == (1, len(elements))
    assert got.flatten().tolist() == list(elements)
    assert all(isinstance(e, bytes) for e in got.flatten())


# --- HTTP ------------------------------------------------------------------------


def test_http_binary_in_and_out(http_client):
    inp = httpclient.InferInput("INPUT0", [1, len(ELEMENTS)], "BYTES")
    inp.set_data_from_numpy(tensor(), binary_data=True)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
    exact(http_client.infer(MODEL, [inp], outputs=[out]).as_numpy("OUTPUT0"))


def test_http_raw_body_exact_bytes(server):
    # The wire format, without tritonclient: the binary tail is the
    # length-prefixed elements, and the same bytes come back.
    raw = serialize_byte_tensor(tensor()).item()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1, len(ELEMENTS)],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(raw)},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    resp = server.request(
        "POST",
        f"/v2/models/{MODEL}/infer",
        header + raw,
        {"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"},
    )
    assert resp.status == 200, resp
    json_len = int(resp.headers["inference-header-content-length"])
    assert resp.body[json_len:] == raw
    out = json.loads(resp.body[:json_len])["outputs"][0]
    assert out["parameters"] == {"binary_data_size": len(raw)}
    assert out["shape"] == [1, len(ELEMENTS)]


def test_http_json_text_with_nul(server):
    # JSON strings are text; NUL is text too ("\u0000") and survives both ways.
    text = ["a\x00b", "", "\x00", "\u00e9\x00\U0001f600"]
    resp = server.request(
        "POST",
        f"/v2/models/{MODEL}/infer",
        {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "BYTES", "data": text}]},
    )
    assert resp.status == 200, resp
    assert b"a\\u0000b" in resp.body
    assert resp.json()["outputs"][0]["data"] == text


def test_http_json_output_that_is_not_utf8(server, http_client):
    # Asked for as JSON, an output whose elements are not UTF-8 is a clear 400
    # (the model ran; the answer can't be written as JSON). Binary works.
    inp = httpclient.InferInput("INPUT0", [1, 3], "BYTES")
    inp.set_data_from_numpy(tensor([b"ok", b"\xff\xfe", b""]), binary_data=True)
    with pytest.raises(InferenceServerException) as err:
        http_client.infer(MODEL, [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)])
    assert err.value.status() == "400"
    assert err.value.message() == (
        "output 'OUTPUT0' can't be returned as JSON: its BYTES element 1 is not valid UTF-8; "
        'request it with "binary_data": true (or in shared memory)'
    )
    # The same with JSON as the default for outputs (no "outputs" in the request).
    raw = serialize_byte_tensor(tensor([b"\xc3\x28"])).item()
    header = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "BYTES", "parameters": {"binary_data_size": len(raw)}}]}
    ).encode()
    resp = server.request(
        "POST", f"/v2/models/{MODEL}/infer", header + raw, {"Inference-Header-Content-Length": str(len(header))}
    )
    assert resp.status == 400, resp
    assert "BYTES element 0 is not valid UTF-8" in resp.json()["error"]
    # binary_data_output makes every output binary.
    header = json.dumps(
        {
            "inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "BYTES", "parameters": {"binary_data_size": len(raw)}}],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    resp = server.request(
        "POST", f"/v2/models/{MODEL}/infer", header + raw, {"Inference-Header-Content-Length": str(len(header))}
    )
    assert resp.status == 200, resp
    assert resp.body.endswith(raw)


# --- gRPC ------------------------------------------------------------------------


def test_grpc_raw_input_contents(grpc_client):
    inp = grpcclient.InferInput("INPUT0", [1, len(ELEMENTS)], "BYTES")
    inp.set_data_from_numpy(tensor())  # raw_input_contents
    result = grpc_client.infer(MODEL, [inp])
    exact(result.as_numpy("OUTPUT0"))


def test_grpc_bytes_contents(server):
    req = service_pb2.ModelInferRequest(model_name=MODEL)
    t = req.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, len(ELEMENTS)])
    t.contents.bytes_contents.extend(ELEMENTS)
    with grpc.insecure_channel(server.grpc_url) as channel:
        resp = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(req, timeout=20)
    assert [(o.name, o.datatype, list(o.shape)) for o in resp.outputs] == [("OUTPUT0", "BYTES", [1, len(ELEMENTS)])]
    assert resp.raw_output_contents[0] == serialize_byte_tensor(tensor()).item()
    assert deserialize_bytes_tensor(resp.raw_output_contents[0]).tolist() == ELEMENTS


def test_grpc_stream(server):
    # ModelStreamInfer carries the same bytes.
    results = []
    done = threading.Event()

    def callback(result, error):
        results.append((result, error))
        done.set()

    client = server.grpc_client()
    try:
        client.start_stream(callback=callback)
        inp = grpcclient.InferInput("INPUT0", [1, len(ELEMENTS)], "BYTES")
        inp.set_data_from_numpy(tensor())
        client.async_stream_infer(MODEL, [inp])
        assert done.wait(20)
        client.stop_stream()
    finally:
        client.close()
    [(result, error)] = results
    assert error is None, error
    exact(result.as_numpy("OUTPUT0"))


# --- system shared memory ---------------------------------------------------------------


@pytest.fixture
def shm_region(request, http_client):
    """shm_region(suffix, size) -> (name, key, handle); unregistered and destroyed at teardown."""
    tag = re.sub(r"[^A-Za-z0-9]+", "_", request.node.name).strip("_")
    made = []

    def create(suffix, size):
        name = f"nereid_{tag}_{suffix}"
        key = f"/nereid_test_{uuid.uuid4().hex[:8]}"
        handle = shm.create_shared_memory_region(name, key, size)
        made.append((name, handle))
        return name, key, handle

    yield create
    for name, handle in made:
        try:
            http_client.unregister_system_shared_memory(name)
        except InferenceServerException:
            pass
        shm.destroy_shared_memory_region(handle)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_system_shared_memory_in_and_out(shm_region, server, protocol):
    client = server.http_client() if protocol == "http" else server.grpc_client()
    module = httpclient if protocol == "http" else grpcclient
    try:
        # tritonclient's way: serialize_byte_tensor, then copy into the region.
        serialized = serialize_byte_tensor(tensor())
        size = len(serialized.item())
        in_name, in_key, in_handle = shm_region("in", size)
        # A larger output region, prefilled, so a short or long write would show.
        out_name, out_key, out_handle = shm_region("out", size + 64)
        shm.set_shared_memory_region(in_handle, [serialized])
        shm.set_shared_memory_region(out_handle, [np.full(size + 64, 0xAA, np.uint8)])
        client.register_system_shared_memory(in_name, in_key, size)
        client.register_system_shared_memory(out_name, out_key, size + 64)

        inp = module.InferInput("INPUT0", [1, len(ELEMENTS)], "BYTES")
        inp.set_shared_memory(in_name, size)
        out = module.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory(out_name, size + 64)
        result = client.infer(MODEL, [inp], outputs=[out])
        output = result.get_output("OUTPUT0")
        # The answer names the output; its bytes are in the region.
        if protocol == "http":
            assert output == {"name": "OUTPUT0", "datatype": "BYTES", "shape": [1, len(ELEMENTS)]}
        else:
            assert (output.datatype, list(output.shape)) == ("BYTES", [1, len(ELEMENTS)])
        exact(shm.get_contents_as_numpy(out_handle, np.object_, [1, len(ELEMENTS)]))
        written = bytes(shm.get_contents_as_numpy(out_handle, np.uint8, [size + 64]))
        assert written[:size] == serialized.item()
        assert written[size:] == b"\xaa" * 64

        # Shared-memory input, output in the body.
        if protocol == "http":
            out = module.InferRequestedOutput("OUTPUT0", binary_data=True)
        else:
            out = module.InferRequestedOutput("OUTPUT0")
        exact(client.infer(MODEL, [inp], outputs=[out]).as_numpy("OUTPUT0"))
    finally:
        client.close()


# --- batching, response cache, ensemble ------------------------------------------------------

BATCHED = (
    'name: "identity_string"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
    'input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
    "dynamic_batching { max_queue_delay_microseconds: 200000 preferred_batch_size: [ 4 ] }\n"
    "response_cache { enable: true }\n"
)
ENSEMBLE = (
    'name: "ensemble_string"\nplatform: "ensemble"\nmax_batch_size: 8\n'
    'input [ { name: "IN" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
    'output [ { name: "OUT" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
    "ensemble_scheduling { step [\n"
    '  { model_name: "identity_string" model_version: -1 input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "mid" } },\n'
    '  { model_name: "identity_string" model_version: -1 input_map { key: "INPUT0" value: "mid" } output_map { key: "OUTPUT0" value: "OUT" } }\n'
    "] }\n"
)


def test_batched_cached_and_ensembled(make_repo, start_server):
    repo = make_repo([MODEL], {MODEL: BATCHED, "ensemble_string": ENSEMBLE})
    srv = start_server(repo, "--cache-config", "local,size=16777216")

    # Four concurrent requests with different elements (one of them all NULs)
    # are batched together; each gets its own bytes back.
    per_request = [[bytes([k]) * k, b"\xff" * k + b"\x00", ELEMENTS[k]] for k in range(4)]
    answers = [None] * 4

    def run(k):
        client = srv.grpc_client()
        try:
            inp = grpcclient.InferInput("INPUT0", [1, 3], "BYTES")
            inp.set_data_from_numpy(tensor(per_request[k]))
            answers[k] = client.infer(MODEL, [inp]).as_numpy("OUTPUT0")
        finally:
            client.close()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        exact(answers[k], per_request[k])
    http = srv.http_client()
    try:
        stats = http.get_inference_statistics(MODEL)["model_stats"][0]
        assert stats["execution_count"] < 4, stats  # at least two were batched

        # The same request again is a cache hit with the same bytes.
        inp = httpclient.InferInput("INPUT0", [1, 3], "BYTES")
        inp.set_data_from_numpy(tensor(per_request[2]), binary_data=True)
        out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
        exact(http.infer(MODEL, [inp], outputs=[out]).as_numpy("OUTPUT0"), per_request[2])
        stats = http.get_inference_statistics(MODEL)["model_stats"][0]
        assert stats["inference_stats"]["cache_hit"]["count"] == 1, stats

        # Through two ensemble steps.
        inp = httpclient.InferInput("IN", [1, len(ELEMENTS)], "BYTES")
        inp.set_data_from_numpy(tensor(), binary_data=True)
        out = httpclient.InferRequestedOutput("OUT", binary_data=True)
        exact(http.infer("ensemble_string", [inp], outputs=[out]).as_numpy("OUT"))
    finally:
        http.close()
