"""--http-header-forward-pattern and --grpc-header-forward-pattern, as in Triton 2.51.

Headers (HTTP) and metadata (gRPC ModelInfer / ModelStreamInfer) whose names the
pattern matches become string request parameters (`HTTPAPIServer::ForwardHeaders` /
`ForEachHeader` in src/http_server.cc, `ForwardHeadersAsParameters` in
src/grpc/infer_handler.h). The pattern is RE2 with a `(?i)` prefix
(src/command_line_parser.cc) matched anywhere in the name (`PartialMatch`); a matching
header named like a reserved parameter fails the request with
"Header '<name>' is reserved for Triton usage and cannot be forwarded."

An ONNX model cannot echo its parameters (Triton's qa/L0_parameters uses a Python
model), so the forwarded values themselves are checked by the Rust frontend tests;
here the observable effect through the real binary is the reserved-name refusal,
which only a *matched* header can trigger, so it shows which names match.
"""

import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import EXAMPLE_MODELS, expect_error

RESERVED = "Header '{}' is reserved for Triton usage and cannot be forwarded."


def add_sub_inputs(module):
    inputs = [module.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    for i in inputs:
        i.set_data_from_numpy(np.ones((1, 4), np.float32))
    return inputs


def http_infer(srv, headers):
    body = {
        "inputs": [
            {"name": n, "shape": [1, 4], "datatype": "FP32", "data": [1.0] * 4}
            for n in ("INPUT0", "INPUT1")
        ]
    }
    return srv.request("POST", "/v2/models/add_sub/infer", body=body, headers=headers)


def grpc_stream_infer(srv, headers):
    """One request on a stream opened with `headers`; its result or error."""
    results = queue.Queue()
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        client.start_stream(callback=lambda result, error: results.put(error or result), headers=headers)
        client.async_stream_infer("add_sub", add_sub_inputs(grpcclient))
        return results.get(timeout=30)
    finally:
        client.stop_stream()
        client.close()


def test_triton_qa_form_forwards_every_header(start_server):
    # qa/L0_grpc and L0_http start tritonserver with exactly these flags.
    srv = start_server(
        EXAMPLE_MODELS,
        "--http-header-forward-pattern=.*",
        "--grpc-header-forward-pattern=.*",
    )
    # Ordinary requests (with their transport headers) still succeed.
    assert http_infer(srv, {"my_header": "v"}).status == 200
    srv.http_client().infer("add_sub", add_sub_inputs(httpclient), headers={"x-a": "1"})
    grpc = srv.grpc_client()
    grpc.infer("add_sub", add_sub_inputs(grpcclient), headers={"x-a": "1"})
    assert not isinstance(grpc_stream_infer(srv, {"x-a": "1"}), InferenceServerException)
    # Every name matches, so a reserved one is refused on each path.
    for name in ("sequence_id", "priority", "triton_x"):
        resp = http_infer(srv, {name: "1"})
        assert (resp.status, resp.json()) == (400, {"error": RESERVED.format(name)})
        err = expect_error(
            grpc.infer, "add_sub", add_sub_inputs(grpcclient), headers={name: "1"}
        )
        assert err.status() == "StatusCode.INVALID_ARGUMENT"
        assert err.message() == RESERVED.format(name)
        err = grpc_stream_infer(srv, {name: "1"})
        assert isinstance(err, InferenceServerException)
        assert RESERVED.format(name) in str(err)
    grpc.close()


def test_match_is_a_case_insensitive_search_unless_the_pattern_says_otherwise(start_server):
    srv = start_server(
        EXAMPLE_MODELS,
        "--http-header-forward-pattern",
        "IORITY",
        "--grpc-header-forward-pattern",
        "(?-i)IORITY",
    )
    # HTTP: "IORITY" is found inside "priority" despite the case.
    resp = http_infer(srv, {"Priority": "1"})
    assert (resp.status, resp.json()) == (400, {"error": RESERVED.format("priority")})
    assert http_infer(srv, {"timeout": "1"}).status == 200
    # gRPC: case-sensitive, and metadata names arrive lower-cased, so nothing matches.
    grpc = srv.grpc_client()
    grpc.infer("add_sub", add_sub_inputs(grpcclient), headers={"priority": "1"})
    grpc.close()


def test_without_the_flags_headers_are_not_forwarded(start_server):
    srv = start_server(EXAMPLE_MODELS)
    assert http_infer(srv, {"sequence_id": "1"}).status == 200
    grpc = srv.grpc_client()
    grpc.infer("add_sub", add_sub_inputs(grpcclient), headers={"triton_x": "1"})
    grpc.close()


@pytest.mark.parametrize("flag", ["http", "grpc"])
def test_an_invalid_pattern_stops_start_up(start_server, flag):
    srv = start_server(
        EXAMPLE_MODELS, f"--{flag}-header-forward-pattern=(unclosed", wait=False
    )
    code = srv.wait_exit(15)
    out = srv.log()
    assert code is not None and code != 0, out
    assert f"--{flag}-header-forward-pattern: invalid header forward pattern '(unclosed'" in out
    assert "panicked" not in out, out
