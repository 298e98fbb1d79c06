"""The SageMaker endpoint (`--allow-sagemaker`) through the real binary.

Servers start with the launch lines of Triton's SageMaker `serve` script
(docker/sagemaker/serve, 2.51), with the port set to 0: the single-model line
(`--load-model`, SAGEMAKER_TRITON_DEFAULT_MODEL_NAME) and the multi-model line
(SAGEMAKER_MULTI_MODEL=true: an empty repository, ping mode `live`). Bodies are made
and read with tritonclient's `generate_request_body` / `parse_response_body`, as
SageMaker's own Triton examples do. Expected statuses and texts are what Triton 2.51
answered to the same requests (probed with its CPU build); comments mark where Nereid
deliberately differs.
"""

import json
import shutil

import numpy as np
import pytest
import tritonclient.http as httpclient

from conftest import EXAMPLE_MODELS, add_sub_body

BINARY = "application/vnd.sagemaker-triton.binary+json;json-header-size="

# docker/sagemaker/serve's arguments common to both modes (port 0 added).
SERVE_SCRIPT = [
    "--allow-sagemaker=true", "--allow-http=false", "--model-control-mode=explicit",
    "--model-namespacing=true", "--allow-grpc=false", "--allow-metrics=false",
    "--log-verbose=true", "--backend-config=python,shm-default-byte-size=16777216",
    "--backend-config=python,shm-growth-byte-size=1048576", "--sagemaker-port=0",
]

A = np.array([[1, 2, 3, 4]], dtype=np.float32)
B = np.array([[1, 1, 1, 1]], dtype=np.float32)


def post_binary(server, path, a=A, b=B, headers=None):
    body, json_size = add_sub_body(a, b)
    headers = {"Content-Type": f"{BINARY}{json_size}", **(headers or {})}
    return server.request("POST", path, body=body, headers=headers, port="sagemaker")


def parse_binary(resp):
    """The InferResult of a SageMaker binary answer (JSON length in the Content-Type)."""
    content_type = resp.headers["content-type"]
    assert content_type.startswith(BINARY), resp
    assert "inference-header-content-length" not in resp.headers
    return httpclient.InferenceServerClient.parse_response_body(
        resp.body, header_length=int(content_type[len(BINARY):]))


@pytest.fixture
def single_model(make_repo, start_server):
    repo = make_repo(["add_sub"])
    return start_server(
        repo, raw_args=[f"--model-repository={repo}", *SERVE_SCRIPT, "--load-model=add_sub"],
        env={"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "add_sub"}, expect={"sagemaker"})


@pytest.fixture
def multi_model(tmp_path, start_server):
    repo = tmp_path / "sagemaker"
    repo.mkdir()
    server = start_server(
        str(repo), raw_args=[f"--model-repository={repo}", *SERVE_SCRIPT],
        env={"SAGEMAKER_MULTI_MODEL": "true", "SAGEMAKER_TRITON_PING_MODE": "live"},
        expect={"sagemaker"})
    assert set(server.bound) == {"sagemaker"}
    return server


def archive(tmp_path, name, models):
    """A model archive as SageMaker unpacks it: a repository of `models` copies."""
    root = tmp_path / name
    for model in models:
        shutil.copytree(f"{EXAMPLE_MODELS}/{model}", root / model)
    return str(root)


def test_ping_and_invocations_of_the_single_model_line(single_model):
    server = single_model
    assert set(server.bound) == {"sagemaker"}
    assert server.bound["sagemaker"][0] == "0.0.0.0", "no address flag: every interface"
    ping = server.request("GET", "/ping", port="sagemaker")
    assert (ping.status, ping.body) == (200, b"")
    refused = server.request("POST", "/ping", port="sagemaker")
    assert (refused.status, refused.json()) == (405, {"error": "Method Not Allowed"})

    body, json_size = add_sub_body(A, B, binary=False)
    assert json_size is None
    resp = server.request("POST", "/invocations", body=body, port="sagemaker")
    assert resp.status == 200, resp
    assert resp.headers["content-type"] == "application/json"
    answer = resp.json()
    assert answer["model_name"] == "add_sub"
    assert answer["outputs"][0]["data"] == [2.0, 3.0, 4.0, 5.0]

    result = parse_binary(post_binary(server, "/invocations"))
    assert (result.as_numpy("OUTPUT0") == A + B).all()
    assert (result.as_numpy("OUTPUT1") == A - B).all()


def test_invocation_errors_are_tritons(single_model):
    server = single_model
    resp = server.request("GET", "/invocations", port="sagemaker")
    assert (resp.status, resp.json()) == (405, {"error": "Method Not Allowed"})
    body, json_size = add_sub_body(A, B)
    too_long = server.request("POST", "/invocations", body=body, port="sagemaker",
                              headers={"Content-Type": f"{BINARY}99999"})
    assert too_long.status == 400
    assert too_long.json()["error"] == (
        f"inference header size should be in range (0, {len(body)}), got: 99999")
    shifted = server.request("POST", "/invocations", body=body, port="sagemaker",
                             headers={"Content-Type": f"x{BINARY}{json_size}"})
    assert shifted.status == 400
    assert shifted.json()["error"] == (
        f"expect MIME type for binary data starts with '{BINARY}', got: x{BINARY}{json_size}")
    # KServe's header is not SageMaker's: the binary data is read as JSON. Triton
    # answers 400 for this and 500 for JSON that does not parse; Nereid 400 for both.
    kserve = server.request("POST", "/invocations", body=body, port="sagemaker",
                            headers={"Inference-Header-Content-Length": str(json_size)})
    assert kserve.status == 400
    missing = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    resp = server.request("POST", "/invocations", body=missing, port="sagemaker")
    assert resp.status == 400
    assert "INPUT1" in resp.json()["error"]
    for method, path in [("GET", "/nothing"), ("GET", "/v2/health/ready"), ("PUT", "/models/x")]:
        resp = server.request(method, path, port="sagemaker")
        assert (resp.status, resp.body) == (400, b""), (method, path)


def test_without_a_default_model_invocations_fail_as_triton(make_repo, start_server):
    # Two models and no SAGEMAKER_TRITON_DEFAULT_MODEL_NAME: Triton's placeholder name.
    repo = make_repo(["add_sub", "identity_fp32"])
    server = start_server(repo, "--allow-sagemaker=true", "--sagemaker-port=0",
                          expect={"http", "grpc", "metrics", "sagemaker"})
    body, _ = add_sub_body(A, B, binary=False)
    resp = server.request("POST", "/invocations", body=body, port="sagemaker")
    assert resp.status == 404
    assert resp.json()["error"] == (
        "Request for unknown model: 'unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME' is not found")


def test_multi_model_load_list_invoke_unload(multi_model, tmp_path):
    server = multi_model
    assert server.request("GET", "/ping", port="sagemaker").status == 200
    url = archive(tmp_path, "a1", ["add_sub"])
    load = {"model_name": "h1", "url": url}
    resp = server.request("POST", "/models", body=load, port="sagemaker")
    assert (resp.status, resp.body) == (200, b""), resp
    listed = server.request("GET", "/models", port="sagemaker")
    assert (listed.status, listed.json()) == (200, {"models": [{"modelName": "h1", "modelUrl": url}]})
    got = server.request("GET", "/models/h1", port="sagemaker")
    assert (got.status, got.json()) == (200, {"modelName": "h1", "modelUrl": url})

    body, _ = add_sub_body(A, B, binary=False)
    resp = server.request("POST", "/models/h1/invoke", body=body, port="sagemaker")
    assert resp.status == 200, resp
    assert resp.json()["model_name"] == "h1"
    result = parse_binary(post_binary(server, "/models/h1/invoke"))
    assert (result.as_numpy("OUTPUT0") == A + B).all()
    # An invocation's errors are 400 whatever their kind (Triton's [FIXME]).
    resp = server.request("POST", "/models/h1/invoke", body=b"{bad", port="sagemaker")
    assert resp.status == 400

    again = server.request("POST", "/models", body=load, port="sagemaker")
    assert again.status == 409
    assert again.json()["error"] == f"model repository '{url}' has already been registered"
    other = archive(tmp_path, "a2", ["add_sub"])
    taken = server.request("POST", "/models", body={"model_name": "h1", "url": other}, port="sagemaker")
    assert taken.status == 409
    assert taken.json()["error"] == "failed to register 'h1', there is a conflicting mapping for 'h1'"
    missing = server.request("POST", "/models", port="sagemaker",
                             body={"model_name": "h3", "url": str(tmp_path / "nope")})
    assert missing.status == 400
    assert missing.json()["error"] == f"failed to register '{tmp_path / 'nope'}', repository not found"

    gone = server.request("DELETE", "/models/h1", port="sagemaker")
    assert (gone.status, gone.body) == (200, b"")
    assert server.request("GET", "/models", port="sagemaker").json() == {"models": []}
    for method, path in [("POST", "/models/h1/invoke"), ("DELETE", "/models/h1"), ("GET", "/models/h1")]:
        resp = server.request(method, path, body=body if method == "POST" else None, port="sagemaker")
        assert (resp.status, resp.body) == (404, b""), (method, path)
    # The archive's repository was unregistered: it loads again.
    assert server.request("POST", "/models", body=load, port="sagemaker").status == 200


def test_multi_model_ensemble_archive(multi_model, tmp_path):
    server = multi_model
    url = archive(tmp_path, "ens", ["add_sub", "ensemble_add_sub"])
    resp = server.request("POST", "/models", body={"model_name": "ens", "url": url}, port="sagemaker")
    assert resp.status == 200, resp
    result = parse_binary(post_binary(server, "/models/ens/invoke"))
    # Two add_sub steps: (a+b)+(a-b), (a+b)-(a-b).
    assert (result.as_numpy("OUTPUT0") == 2 * A).all()
    assert (result.as_numpy("OUTPUT1") == 2 * B).all()
    assert server.request("DELETE", "/models/ens", port="sagemaker").status == 200


def test_multi_model_load_failures(multi_model, tmp_path):
    server = multi_model
    url = archive(tmp_path, "bad", ["add_sub"])
    with open(f"{url}/add_sub/config.pbtxt", "a") as config:
        config.write("\nthis is not a field\n")
    resp = server.request("POST", "/models", body={"model_name": "b1", "url": url}, port="sagemaker")
    assert resp.status == 400
    assert resp.json()["error"].startswith("failed to load '"), resp
    assert "b1" in resp.json()["error"], resp
    assert server.request("GET", "/models", port="sagemaker").json() == {"models": []}
    # The failed archive's repository was unregistered: the same request fails the same way.
    again = server.request("POST", "/models", body={"model_name": "b1", "url": url}, port="sagemaker")
    assert again.status == 400
    # Triton aborts on a model_name that is not a string and waits forever on a load
    # without a name; Nereid refuses both.
    for body in ({"model_name": 5, "url": url}, {"url": url}):
        resp = server.request("POST", "/models", body=json.dumps(body).encode(), port="sagemaker")
        assert resp.status == 400, body


def test_multi_model_loads_need_explicit_model_control(make_repo, start_server, tmp_path):
    repo = make_repo(["add_sub"])
    server = start_server(repo, "--allow-sagemaker=true", "--sagemaker-port=0",
                          expect={"http", "grpc", "metrics", "sagemaker"})
    url = archive(tmp_path, "a1", ["add_sub"])
    resp = server.request("POST", "/models", body={"model_name": "h", "url": url}, port="sagemaker")
    assert resp.status == 400
    assert resp.json()["error"] == (
        "repository registration is not allowed if model control mode is not EXPLICIT")
