"""The HTTP wire format by hand (http.client): binary tensor extension,
compression, status codes and error bodies. Expected texts were measured on
Triton 2.51 unless a comment says otherwise."""

import gzip
import json
import zlib

import numpy as np
import pytest

A = np.array([[0.0, 1.0, 2.0, 3.0]], dtype=np.float32)
B = np.array([[1.0, 1.0, 1.0, 1.0]], dtype=np.float32)
INFER = "/v2/models/add_sub/infer"


def binary_header(extra=None, sizes=(16, 16)):
    hdr = {
        "inputs": [
            {"name": name, "shape": [1, 4], "datatype": "FP32", "parameters": {"binary_data_size": size}}
            for name, size in zip(("INPUT0", "INPUT1"), sizes)
        ]
    }
    hdr.update(extra or {})
    return json.dumps(hdr).encode()


def post_binary(server, hdr, tail, header_len=None):
    headers = {"Content-Type": "application/octet-stream"}
    headers["Inference-Header-Content-Length"] = str(len(hdr) if header_len is None else header_len)
    return server.request("POST", INFER, hdr + tail, headers)


def json_body(**extra):
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": A.flatten().tolist()},
            {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32", "data": B.flatten().tolist()},
        ]
    }
    body.update(extra)
    return json.dumps(body).encode()


EXPECTED_JSON_OUTPUTS = [
    {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1.0, 2.0, 3.0, 4.0]},
    {"name": "OUTPUT1", "datatype": "FP32", "shape": [1, 4], "data": [-1.0, 0.0, 1.0, 2.0]},
]


def assert_error(resp, status, message):
    assert resp.status == status, resp
    assert resp.headers["content-type"].startswith(("application/json", "text/plain")), resp
    assert resp.json() == {"error": message}


def assert_still_serving(server):
    resp = server.request("POST", INFER, json_body())
    assert resp.status == 200, resp
    assert resp.json()["outputs"] == EXPECTED_JSON_OUTPUTS


def test_binary_inputs_split_by_header_length(server):
    resp = post_binary(server, binary_header(), A.tobytes() + B.tobytes())
    assert resp.status == 200, resp
    # Outputs not asked for in binary come back as JSON.
    assert resp.headers["content-type"].startswith("application/json")
    assert "inference-header-content-length" not in resp.headers
    assert resp.json() == {"model_name": "add_sub", "model_version": "1", "outputs": EXPECTED_JSON_OUTPUTS}


def test_binary_input_without_header_length(server):
    # Without Inference-Header-Content-Length the whole body is the JSON, so the
    # bytes promised by binary_data_size are missing. (Triton 2.51 gives the same
    # answer when raw bytes follow the JSON, but that depends on its parser
    # stopping at the end of the first JSON value; not tested.)
    resp = server.request("POST", INFER, binary_header())
    assert_error(
        resp,
        400,
        "unexpected size for input 'INPUT0', expecting 16 additional bytes for model 'add_sub'",
    )
    assert_still_serving(server)


@pytest.mark.parametrize(
    "tail,message",
    [
        (A.tobytes() + B.tobytes()[:10], "unexpected size for input 'INPUT1', expecting 6 additional bytes for model 'add_sub'"),
        (A.tobytes()[:10], "unexpected size for input 'INPUT0', expecting 6 additional bytes for model 'add_sub'"),
        (A.tobytes() + B.tobytes() + b"xx", "unexpected additional input data for model 'add_sub'"),
    ],
    ids=["short-second", "short-first", "extra-bytes"],
)
def test_binary_tail_wrong_length(server, tail, message):
    assert_error(post_binary(server, binary_header(), tail), 400, message)
    assert_still_serving(server)


def test_header_length_larger_than_body(server):
    hdr = binary_header()
    body_len = len(hdr) + 32
    resp = post_binary(server, hdr, A.tobytes() + B.tobytes(), header_len=100000)
    assert_error(resp, 400, f"inference header size should be in range (0, {body_len}), got: 100000")


def test_binary_data_size_mismatch(server):
    # binary_data_size 12 for a [1,4] FP32 input (16 bytes).
    hdr = binary_header(sizes=(12, 16))
    resp = post_binary(server, hdr, A.tobytes()[:12] + B.tobytes())
    assert_error(
        resp,
        400,
        "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'add_sub'. Expected 16, got 12",
    )
    assert_still_serving(server)


def split_binary_response(resp):
    assert resp.status == 200, resp
    assert resp.headers["content-type"] == "application/octet-stream"
    json_len = int(resp.headers["inference-header-content-length"])
    return json.loads(resp.body[:json_len]), resp.body[json_len:]


def test_binary_data_output_for_all_outputs(server):
    hdr = binary_header({"parameters": {"binary_data_output": True}})
    header, tail = split_binary_response(post_binary(server, hdr, A.tobytes() + B.tobytes()))
    assert header == {
        "model_name": "add_sub",
        "model_version": "1",
        "outputs": [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}},
            {"name": "OUTPUT1", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}},
        ],
    }
    assert tail == (A + B).tobytes() + (A - B).tobytes()


def test_binary_data_per_output(server):
    body = json_body(outputs=[{"name": "OUTPUT1", "parameters": {"binary_data": True}}])
    header, tail = split_binary_response(server.request("POST", INFER, body))
    assert header["outputs"] == [
        {"name": "OUTPUT1", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}}
    ]
    assert tail == (A - B).tobytes()


def test_requested_outputs_json(server):
    resp = server.request("POST", INFER, json_body(outputs=[{"name": "OUTPUT1"}]))
    assert resp.status == 200, resp
    assert resp.json()["outputs"] == EXPECTED_JSON_OUTPUTS[1:]


def test_data_and_binary_size_both_set(server):
    body = json.loads(json_body())
    body["inputs"][0]["parameters"] = {"binary_data_size": 16}
    resp = server.request("POST", INFER, body)
    assert_error(
        resp,
        400,
        "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
        "'shared_memory_region' in 'parameters'. But set 'data' 'binary_data_size'",
    )
    del body["inputs"][0]["parameters"]
    del body["inputs"][0]["data"]
    resp = server.request("POST", INFER, body)
    assert_error(
        resp,
        400,
        "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
        "'shared_memory_region' in 'parameters'. But no field is set",
    )
    assert_still_serving(server)


@pytest.mark.parametrize(
    "data,message",
    [
        ([1.0, 2.0, 3.0], "Failed to parse 'data' field: shape does not match true shape"),
        (
            [1.0, 2.0, 3.0, 4.0, 5.0],
            "Unable to parse 'data': Shape does not match true shape of 'data' field",
        ),
    ],
    ids=["too_few", "too_many"],
)
def test_json_data_count_mismatch(server, data, message):
    # Values that do not fill a [1,4] tensor exactly: Triton's words (L0_http checks
    # them); Triton answers 500 (a server error) for this client mistake, Nereid 400
    # (documented difference).
    body = json.loads(json_body())
    body["inputs"][0]["data"] = data
    resp = server.request("POST", INFER, body)
    assert resp.status == 400, resp
    assert resp.json() == {"error": message}
    assert_still_serving(server)


@pytest.mark.parametrize(
    "encoding,compress",
    [("gzip", gzip.compress), ("deflate", zlib.compress)],
)
def test_compressed_request_body(server, encoding, compress):
    resp = server.request("POST", INFER, compress(json_body()), {"Content-Encoding": encoding})
    assert resp.status == 200, resp
    assert resp.json()["outputs"] == EXPECTED_JSON_OUTPUTS


def test_compressed_binary_request_body(server):
    # Inference-Header-Content-Length counts the JSON of the decompressed body.
    hdr = binary_header()
    resp = server.request(
        "POST",
        INFER,
        gzip.compress(hdr + A.tobytes() + B.tobytes()),
        {"Content-Encoding": "gzip", "Inference-Header-Content-Length": str(len(hdr))},
    )
    assert resp.status == 200, resp
    assert resp.json()["outputs"] == EXPECTED_JSON_OUTPUTS


@pytest.mark.parametrize(
    "encoding,decompress",
    [("gzip", gzip.decompress), ("deflate", zlib.decompress)],
)
def test_compressed_response(server, encoding, decompress):
    resp = server.request("POST", INFER, json_body(), {"Accept-Encoding": encoding})
    assert resp.status == 200, resp
    assert resp.headers["content-encoding"] == encoding
    assert json.loads(decompress(resp.body))["outputs"] == EXPECTED_JSON_OUTPUTS


def test_malformed_json(server):
    # Triton 2.51 answers 500 "failed to parse the request JSON buffer: <parser
    # detail>"; a malformed body is the client's mistake, so Nereid answers 400
    # with the same prefix (documented difference). The detail is the parser's.
    resp = server.request("POST", INFER, b'{"inputs": [ ')
    assert resp.status == 400, resp
    error = resp.json()["error"]
    assert error.startswith("failed to parse the request JSON buffer")
    assert_still_serving(server)


def test_missing_inputs_member(server):
    # Triton: 500 "Unable to parse 'inputs'..."; Nereid: 400 naming the field.
    resp = server.request("POST", INFER, b"{}")
    assert resp.status == 400, resp
    error = resp.json()["error"]
    assert error.startswith("failed to parse the request JSON buffer"), error
    assert "inputs" in error, error


def test_triton_parameter_rejected(server):
    resp = server.request("POST", INFER, json_body(parameters={"triton_foo": 1}))
    assert_error(
        resp,
        400,
        "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.",
    )
    assert_still_serving(server)


def test_custom_parameters_accepted(server):
    resp = server.request("POST", INFER, json_body(parameters={"custom": "x", "n": 3, "f": 0.5, "b": True}))
    assert resp.status == 200, resp
    assert resp.json()["outputs"] == EXPECTED_JSON_OUTPUTS


@pytest.mark.parametrize(
    "method,path",
    [
        ("GET", INFER),
        ("POST", "/v2/health/live"),
        ("POST", "/v2/health/ready"),
        ("POST", "/v2"),
        ("GET", "/v2/repository/index"),
        ("DELETE", "/v2/models/add_sub"),
    ],
)
def test_wrong_method(server, method, path):
    assert_error(server.request(method, path), 405, "Method Not Allowed")


@pytest.mark.parametrize("path", ["/v2/bogus", "/v3", "/v2/models/add_sub/", "/v2/models/add_sub/bogus", "/"])
def test_unknown_path(server, path):
    assert_error(server.request("GET", path), 404, "Not Found")


def test_metrics_port_serves_metrics_only(server):
    resp = server.request("GET", "/metrics", port="metrics")
    assert resp.status == 200, resp
    assert resp.headers["content-type"].startswith("text/plain")
    assert "# TYPE nv_inference_request_success counter" in resp.body.decode()


# --- Raw binary requests (Inference-Header-Content-Length: 0), issue 22 item 3.
# Messages and the binary-by-default answer were measured on Triton 2.51.


def post_raw(server, model, body):
    return server.request(
        "POST", f"/v2/models/{model}/infer", body, {"Inference-Header-Content-Length": "0"}
    )


def split_binary_answer(resp):
    n = int(resp.headers["inference-header-content-length"])
    return json.loads(resp.body[:n]), resp.body[n:]


def test_raw_request_fills_the_single_input_and_answers_in_binary(server):
    data = np.arange(8, dtype=np.float32)
    resp = post_raw(server, "identity_fp32", data.tobytes())
    assert resp.status == 200, resp
    assert resp.headers["content-type"] == "application/octet-stream"
    header, tail = split_binary_answer(resp)
    assert header["outputs"] == [
        {
            "name": "OUTPUT0",
            "datatype": "FP32",
            "shape": [1, 8],
            "parameters": {"binary_data_size": 32},
        }
    ]
    assert tail == data.tobytes()


def test_raw_request_to_a_model_with_two_inputs(server):
    resp = post_raw(server, "add_sub", np.zeros(8, dtype=np.float32).tobytes())
    assert resp.status == 400, resp
    assert json.loads(resp.body) == {
        "error": "[request id: <id_unknown>] Raw request must only have 1 input (found 1) "
        "to be deduced but got 2 inputs in 'add_sub' model configuration"
    }


def test_raw_bytes_input_needs_shape_one(server, make_repo, start_server):
    resp = post_raw(server, "identity_string", b"hello")
    assert resp.status == 400, resp
    assert json.loads(resp.body)["error"] == (
        "[request id: <id_unknown>] For BYTE datatype raw input 'INPUT0', "
        "the model must have input shape [1]"
    )
    config = (
        'name: "identity_string"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
    )
    srv = start_server(make_repo(["identity_string"], {"identity_string": config}))
    resp = post_raw(srv, "identity_string", b"hello")
    assert resp.status == 200, resp
    header, tail = split_binary_answer(resp)
    assert header["outputs"][0]["shape"] == [1, 1]
    assert tail == b"\x05\x00\x00\x00hello"


# --- --http-max-input-size (Triton's default 64 MiB) and JSON nesting, issue 22 item 5.
# Messages from Triton's http_server.cc and data_compressor.h.

LIMIT = 1024


@pytest.fixture
def small_limit_server(make_repo, start_server):
    return start_server(make_repo(["identity_fp32"]), "--http-max-input-size", str(LIMIT))


def error(resp, status=400):
    assert resp.status == status, resp
    return json.loads(resp.body)["error"]


def test_raw_input_over_the_limit(small_limit_server):
    assert post_raw(small_limit_server, "identity_fp32", bytes(LIMIT)).status == 200
    assert error(post_raw(small_limit_server, "identity_fp32", bytes(LIMIT + 4))) == (
        f"Raw input has a byte_size ({LIMIT + 4} bytes) that exceeds the maximum allowed value "
        f"of {LIMIT} bytes. Use --http-max-input-size to increase the limit."
    )


def test_json_over_the_limit(small_limit_server):
    values = [0.0] * 300
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1, 300], "datatype": "FP32", "data": values}]}
    ).encode()
    assert error(small_limit_server.request("POST", "/v2/models/identity_fp32/infer", body)) == (
        f"request JSON size of {len(body)} bytes exceeds the maximum allowed input size of "
        f"{LIMIT} bytes. Use --http-max-input-size to increase the limit."
    )
    # A short body declaring a large tensor is refused before its data is read.
    small = {"inputs": [{"name": "INPUT0", "shape": [1, 1000], "datatype": "FP32", "data": [1]}]}
    assert error(small_limit_server.request("POST", "/v2/models/identity_fp32/infer", small)) == (
        "JSON input 'INPUT0' has a byte_size (4000 bytes) that exceeds the maximum allowed "
        f"value of {LIMIT} bytes. Use --http-max-input-size to increase the limit."
    )


def test_declared_shapes_that_overflow_are_refused_in_tritons_order(small_limit_server):
    """L0_http's test_buffer_size_overflow (server main, 2.7x): the element count is
    checked before the batch size, then the byte size, in Triton's words."""

    def infer(shape):
        body = {"inputs": [{"name": "INPUT0", "shape": shape, "datatype": "FP32", "data": [1.0]}]}
        return error(small_limit_server.request("POST", "/v2/models/identity_fp32/infer", body))

    assert infer([2**4, 2**60 + 2]) == (
        "invalid shape for input 'INPUT0': shape [16,1152921504606846978] causes total element "
        "count to exceed maximum size of 9223372036854775807"
    )
    assert infer([2**2, 2**60 + 2]) == (
        "byte size overflow for input 'INPUT0': element count (4611686018427387912) * data type "
        "size (4) exceeds maximum allowed size (9223372036854775807)"
    )
    # Triton answers this one 500; Nereid keeps its words and answers 400 (docs: differences).
    assert infer([2, -5]) == (
        "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer"
    )
    assert small_limit_server.http_client().is_server_live()


def test_repository_index_refuses_a_ready_that_is_not_a_boolean(make_repo, start_server):
    """L0_http's test_repository_index_deeply_nested_json: refused at the first bracket."""
    server = start_server(make_repo(["identity_fp32"]))
    nested = "[" * 250000 + "true" + "]" * 250000
    for ready in (nested, '"yes"', "1", "null", "{}"):
        body = ('{"ready":' + ready + "}").encode()
        resp = server.request("POST", "/v2/repository/index", body)
        assert error(resp) == "Invalid value for 'ready': expected a boolean", ready
    # Malformed JSON keeps the parser's message.
    resp = server.request("POST", "/v2/repository/index", b'{"ready":tru')
    assert error(resp).startswith("failed to parse the request JSON buffer")
    resp = server.request("POST", "/v2/repository/index", b'{"ready":true}')
    assert resp.status == 200 and resp.json() == [
        {"name": "identity_fp32", "version": "1", "state": "READY"}]


def test_a_load_request_over_the_limit_is_refused_before_it_is_read(make_repo, start_server):
    """L0_http's test_loading_large_invalid_model, with a 1 KiB limit for a 2 GiB body."""
    server = start_server(make_repo(["identity_fp32"]), "--http-max-input-size", str(LIMIT),
                          "--model-control-mode", "explicit")
    body = json.dumps({"parameters": {"config": "{}", "file:1/model.onnx": "A" * 2 * LIMIT}}).encode()
    resp = server.request("POST", "/v2/repository/models/invalid_onnx/load", body)
    assert error(resp) == (
        f"request JSON size of {len(body)} bytes exceeds the maximum allowed input size of "
        f"{LIMIT} bytes. Use --http-max-input-size to increase the limit."
    )
    assert server.http_client().is_server_live()


def test_decompressed_body_over_the_limit(small_limit_server):
    body = gzip.compress(b" " * (LIMIT + 1))
    resp = small_limit_server.request(
        "POST", "/v2/models/identity_fp32/infer", body, {"Content-Encoding": "gzip"}
    )
    assert error(resp) == (
        f"Decompressed data size exceeds the maximum allowed value of {LIMIT} bytes. "
        "Use --http-max-input-size to increase the limit."
    )


def test_binary_data_after_the_json_is_not_held_to_the_input_limit(small_limit_server):
    # As Triton: --http-max-input-size bounds the JSON, not the binary tensor data after
    # it (L0_large_payload sends 1.9 GB with default flags). A body is bounded at 2 GiB.
    data = np.arange(4 * LIMIT, dtype=np.float32).tobytes()
    hdr = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1, len(data) // 4],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": len(data)},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    headers = {"Inference-Header-Content-Length": str(len(hdr))}
    resp = small_limit_server.request("POST", "/v2/models/identity_fp32/infer", hdr + data, headers)
    assert resp.status == 200, resp
    assert resp.body.endswith(data)
    # A body announced past 2 GiB is refused before a byte of it is read.
    too_long = dict(headers, **{"Content-Length": str(2**31)})
    resp = small_limit_server.request("POST", "/v2/models/identity_fp32/infer", b"", too_long)
    assert error(resp, 413) == "Failed to buffer the request body: length limit exceeded"
    assert small_limit_server.http_client().is_server_live()


def nested(levels, leaf="1"):
    return "[" * levels + leaf + "]" * levels


@pytest.mark.parametrize("levels, ok", [(99, True), (100, False)])
def test_data_nesting_depth(server, levels, ok):
    body = (
        '{"inputs":[{"name":"INPUT0","shape":[1,1],"datatype":"FP32","data":%s}]}' % nested(levels)
    ).encode()
    resp = server.request("POST", "/v2/models/identity_fp32/infer", body)
    if ok:
        assert resp.status == 200, resp
    else:
        # Triton's HTTP_MAX_JSON_NESTING_DEPTH check (added after 2.51, which has none).
        assert error(resp) == (
            "Unable to parse 'data': JSON nesting depth exceeds maximum allowed limit (100)"
        )
