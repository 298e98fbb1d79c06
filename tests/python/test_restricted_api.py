"""--http-restricted-api and --grpc-restricted-protocol, as in Triton 2.51.

A restricted API group answers only requests carrying its header with its value.
Triton's refusals: HTTP 403 `{"error": "This API is restricted, expecting header '<key>'"}`
(`HTTPAPIServer::RespondIfRestricted`, checked before the method), gRPC UNAVAILABLE
`This protocol is restricted, expecting header 'triton-grpc-protocol-<key>'`
(`CommonCallData::Execute`, `infer_handler.cc`, `stream_infer_handler.cc`). Groups and
flag messages: `src/restricted_features.h`, `TritonParser::ParseRestrictedFeatureOption`.
"""

import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import EXAMPLE_MODELS, Server, base_args, expect_error

ADMIN = {"admin-key": "s3cret"}
GRPC_ADMIN = {"triton-grpc-protocol-admin-key": "s3cret"}
HTTP_REFUSAL = "This API is restricted, expecting header 'admin-key'"
GRPC_REFUSAL = "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'"


@pytest.fixture(scope="module")
def srv():
    args = base_args(
        EXAMPLE_MODELS,
        [
            "--allow-client-shm=true",
            "--http-restricted-api=shared-memory,model-repository:admin-key=s3cret",
            "--http-restricted-api",
            "health:probe=1",
            "--grpc-restricted-protocol=inference,shared-memory:admin-key=s3cret",
        ],
    )
    server = Server(EXAMPLE_MODELS, args)
    try:
        yield server.wait_started()
    finally:
        server.kill()


def add_sub_inputs(module):
    inputs = [module.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    for i in inputs:
        i.set_data_from_numpy(np.ones((1, 4), np.float32))
    return inputs


def test_http_restricted_groups_need_the_exact_header(srv):
    refused = (403, {"error": HTTP_REFUSAL})
    for method, path in [
        ("GET", "/v2/systemsharedmemory/status"),
        ("POST", "/v2/cudasharedmemory/unregister"),
        ("POST", "/v2/systemsharedmemory/region/r/register"),
        ("POST", "/v2/repository/index"),
        ("POST", "/v2/repository/models/add_sub/load"),
        ("GET", "/v2/systemsharedmemory/status"),
        ("POST", "/v2/systemsharedmemory/status"),  # the restriction comes before the method
    ]:
        for headers in [{}, {"admin-key": "wrong"}, {"other": "s3cret"}]:
            r = srv.request(method, path, headers=headers)
            assert (r.status, r.json()) == refused, (method, path, headers)
    assert srv.request("GET", "/v2/systemsharedmemory/status", headers=ADMIN).json() == []
    assert srv.request("POST", "/v2/repository/index", headers=ADMIN).status == 200
    r = srv.request("GET", "/v2/health/live")
    assert (r.status, r.json()) == (403, {"error": "This API is restricted, expecting header 'probe'"})
    assert srv.request("GET", "/v2/models/add_sub/ready").status == 403
    assert srv.request("GET", "/v2/health/ready", headers={"probe": "1"}).status == 200
    # Unrestricted groups and unknown paths are unaffected.
    assert srv.request("GET", "/v2").status == 200
    assert srv.request("GET", "/v2/models/add_sub/config").status == 200
    assert srv.request("GET", "/v2/nope").status == 404


def test_http_client_with_headers(srv):
    client = srv.http_client()
    e = expect_error(client.get_system_shared_memory_status)
    assert (e.status(), e.message()) == ("403", HTTP_REFUSAL)
    assert client.get_system_shared_memory_status(headers=ADMIN) == []
    client.unregister_system_shared_memory(headers=ADMIN)
    # Inference is restricted on gRPC only.
    assert client.infer("add_sub", add_sub_inputs(httpclient)).as_numpy("OUTPUT0").tolist() == [[2.0] * 4]


def test_grpc_restricted_groups_need_the_metadata(srv):
    client = srv.grpc_client()
    for call in [
        lambda **h: client.infer("add_sub", add_sub_inputs(grpcclient), **h),
        lambda **h: client.get_system_shared_memory_status(**h),
        lambda **h: client.unregister_cuda_shared_memory(**h),
    ]:
        for headers in [{}, {"triton-grpc-protocol-admin-key": "no"}, ADMIN]:
            e = expect_error(call, headers=headers)
            assert (e.status(), e.message()) == ("StatusCode.UNAVAILABLE", GRPC_REFUSAL), headers
        call(headers=GRPC_ADMIN)
    # Health is restricted on HTTP only; repository on HTTP only.
    assert client.is_server_live()
    assert client.get_model_repository_index().models


def test_grpc_stream_is_refused_without_the_metadata(srv):
    for headers, expect_ok in [(None, False), (GRPC_ADMIN, True)]:
        results = queue.Queue()
        client = srv.grpc_client()
        client.start_stream(callback=lambda result, error: results.put((result, error)), headers=headers)
        try:
            client.async_stream_infer("add_sub", add_sub_inputs(grpcclient))
        except InferenceServerException:
            # The refused stream may already be closed; the callback has the status.
            assert not expect_ok
        result, error = results.get(timeout=10)
        client.stop_stream()
        if expect_ok:
            assert error is None and result.as_numpy("OUTPUT1").tolist() == [[0.0] * 4]
        else:
            assert error is not None and GRPC_REFUSAL in error.message(), error


@pytest.mark.parametrize(
    "args, message",
    [
        (["--http-restricted-api=health"], "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got health"),
        (["--grpc-restricted-protocol=health:k="], "--grpc-restricted-protocol option format is '<config name>:<setting>=<value>'. Got health:k="),
        (["--http-restricted-api=helth:k=v"], "unknown restricted api 'helth'"),
        (["--grpc-restricted-protocol=inference,bogus:k=v"], "unknown restricted protocol 'bogus'"),
        (
            ["--http-restricted-api=trace:k=v", "--http-restricted-api=logging,trace:k=w"],
            "restricted api 'trace' can not be specified in multiple config groups",
        ),
    ],
)
def test_bad_flags_stop_start_up(start_server, args, message):
    server = start_server(EXAMPLE_MODELS, *args, wait=False)
    assert server.wait_exit(10) != 0
    assert message in server.log(), server.log()
