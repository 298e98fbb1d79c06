"""The Vertex AI endpoint through the real binary, started as Vertex AI starts a
container: `AIP_MODE=PREDICTION` (Vertex AI on, HTTP and gRPC off by default),
`AIP_HTTP_PORT`, `AIP_PREDICT_ROUTE`, `AIP_HEALTH_ROUTE` and `AIP_STORAGE_URI` in the
environment, no `--model-repository`. Expected statuses and texts are what Triton 2.51
answered to the same requests (probed with its CPU build).
"""

import numpy as np
import pytest
import tritonclient.http as httpclient

from conftest import add_sub_body

BINARY = "application/vnd.vertex-ai-triton.binary+json;json-header-size="
PREDICT = "/v1/endpoints/123/deployedModels/456:predict"
HEALTH = "/v1/endpoints/123/deployedModels/456"
REDIRECT = "X-Vertex-Ai-Triton-Redirect"

A = np.array([[1, 2, 3, 4]], dtype=np.float32)
B = np.array([[1, 1, 1, 1]], dtype=np.float32)


def vertex_env(repo, **extra):
    env = {
        "AIP_MODE": "PREDICTION",
        "AIP_HTTP_PORT": "0",
        "AIP_PREDICT_ROUTE": PREDICT,
        "AIP_HEALTH_ROUTE": HEALTH,
        "AIP_STORAGE_URI": repo,
    }
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


@pytest.fixture
def vertex(make_repo, start_server):
    repo = make_repo(["add_sub", "identity_fp32"])
    server = start_server(repo, raw_args=["--vertex-ai-default-model=add_sub", "--allow-metrics=false"],
                          env=vertex_env(repo), expect={"vertex_ai"})
    assert set(server.bound) == {"vertex_ai"}, "AIP_MODE=PREDICTION turns HTTP and gRPC off"
    return server


def post(server, body=None, headers=None, method="POST", path=PREDICT):
    return server.request(method, path, body=body, headers=headers, port="vertex_ai")


def test_health_and_predict_routes(vertex):
    assert vertex.bound["vertex_ai"][0] == "0.0.0.0", "no address flag: every interface"
    health = post(vertex, method="GET", path=HEALTH)
    assert (health.status, health.body) == (200, b"")
    refused = post(vertex, path=HEALTH)
    assert (refused.status, refused.json()) == (405, {"error": "Method Not Allowed"})
    for path in ["/v2/health/ready", HEALTH + "/x", "/v1/endpoints/123/deployedModels/456:explain"]:
        resp = post(vertex, method="GET", path=path)
        assert (resp.status, resp.body) == (400, b""), path

    body, _ = add_sub_body(A, B, binary=False)
    resp = post(vertex, body)
    assert resp.status == 200, resp
    assert resp.json()["model_name"] == "add_sub"
    assert resp.json()["outputs"][0]["data"] == [2.0, 3.0, 4.0, 5.0]
    resp = post(vertex, method="GET")
    assert (resp.status, resp.json()) == (405, {"error": "Method Not Allowed"})

    # The request's JSON length comes in the Content-Type, the answer's in KServe's header.
    body, json_size = add_sub_body(A, B, binary=True)
    resp = post(vertex, body, {"Content-Type": f"{BINARY}{json_size}"})
    assert resp.status == 200, resp
    assert resp.headers["content-type"] == "application/octet-stream"
    result = httpclient.InferenceServerClient.parse_response_body(
        resp.body, header_length=int(resp.headers["inference-header-content-length"]))
    assert (result.as_numpy("OUTPUT1") == A - B).all()
    too_long = post(vertex, body, {"Content-Type": f"{BINARY}99999"})
    assert too_long.status == 400
    assert too_long.json()["error"] == (
        f"inference header size should be in range (0, {len(body)}), got: 99999")


def test_the_redirect_header(vertex):
    identity = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [5, 6, 7, 8]}]}
    resp = post(vertex, identity, {REDIRECT: "v2/models/identity_fp32/infer"})
    assert resp.status == 200, resp
    assert resp.json()["model_name"] == "identity_fp32"
    assert resp.json()["outputs"][0]["data"] == [5.0, 6.0, 7.0, 8.0]
    ready = post(vertex, headers={REDIRECT: "v2/models/add_sub/versions/1/ready"})
    assert (ready.status, ready.body) == (200, b"")
    unknown = post(vertex, headers={REDIRECT: "v2/models/nosuch/ready"})
    assert (unknown.status, unknown.json()) == (400, {"error": "Model version not ready"})
    assert post(vertex, headers={REDIRECT: "v2/health/ready"}).status == 200
    assert post(vertex, headers={REDIRECT: "v2/models/add_sub"}).json()["name"] == "add_sub"
    assert post(vertex, headers={REDIRECT: "v2/models/add_sub/config"}).json()["max_batch_size"] == 8
    stats = post(vertex, headers={REDIRECT: "v2/models/identity_fp32/stats"}).json()
    assert stats["model_stats"][0]["inference_count"] == 1
    index = post(vertex, {"ready": True}, {REDIRECT: "v2/repository/index"})
    assert sorted(m["name"] for m in index.json()) == ["add_sub", "identity_fp32"]
    # Metrics come through the redirect even with --allow-metrics=false, as in Triton.
    metrics = post(vertex, headers={REDIRECT: "metrics"})
    assert metrics.status == 200
    assert 'nv_inference_request_success{model="identity_fp32",version="1"} 1' in metrics.body.decode()
    for not_redirected in ["v2/models/add_sub/generate", "v2/trace/setting", "/v2", "nothing"]:
        resp = post(vertex, headers={REDIRECT: not_redirected})
        assert (resp.status, resp.body) == (400, b""), not_redirected
    resp = post(vertex, method="GET", headers={REDIRECT: "v2"})
    assert (resp.status, resp.body) == (405, b"")


@pytest.mark.parametrize("env, args, message", [
    ({"AIP_PREDICT_ROUTE": None}, [], "API_PREDICT_ROUTE is not defined for Vertex AI endpoint"),
    ({"AIP_HEALTH_ROUTE": None}, [], "AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint"),
    ({}, [], "Expect the model repository contains only a single model if default model is not specified"),
    ({}, ["--vertex-ai-default-model=nosuch"], "Expect the default model 'nosuch' is loaded"),
])
def test_start_up_failures_are_tritons(make_repo, start_server, env, args, message):
    repo = make_repo(["add_sub", "identity_fp32"])
    server = start_server(repo, raw_args=["--allow-metrics=false", *args],
                          env=vertex_env(repo, **env), wait=False)
    assert server.wait_exit(15) == 1
    assert f"failed to start Vertex AI service: Invalid argument - {message}" in server.log()


def test_a_single_model_is_the_default(make_repo, start_server):
    repo = make_repo(["add_sub"])
    server = start_server(repo, raw_args=["--allow-metrics=false"], env=vertex_env(repo),
                          expect={"vertex_ai"})
    body, _ = add_sub_body(A, B, binary=False)
    resp = post(server, body)
    assert (resp.status, resp.json()["model_name"]) == (200, "add_sub")
