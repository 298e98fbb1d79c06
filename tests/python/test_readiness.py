"""Server readiness (`GET /v2/health/ready`, gRPC `ServerReady`) as Triton computes it.

With --strict-readiness (the default) Triton's `InferenceServer::IsReady` is ready while
every model version in its model lifecycle is READY or was unloaded; a version that
failed to load keeps the server unready, a model whose configuration could not be read
never reaches the lifecycle and does not. Each answer below was taken from Triton 2.51
(../shared/triton, python-backend models of the same roles: one that loads, one whose
`initialize` raises, one whose config.pbtxt does not parse) on 2026-11-28; the two cases
where Nereid deliberately answers otherwise say so.
"""

import os
import shutil

import pytest
import tritonclient.grpc as grpcclient
from conftest import EXAMPLE_MODELS

from test_repository import BROKEN_SYNTAX, add_corrupt


def ready(server):
    """The HTTP status of /v2/health/ready, checked against gRPC ServerReady. Readiness
    may change while a poll loads or unloads a model: the gRPC answer is compared only
    when the HTTP answers before and after it agree."""
    grpc_ = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        while True:
            status = server.request("GET", "/v2/health/ready").status
            grpc_ready = grpc_.is_server_ready()
            if server.request("GET", "/v2/health/ready").status == status:
                assert grpc_ready == (status == 200), "HTTP and gRPC disagree"
                return status
    finally:
        grpc_.close()


def post(server, path):
    return server.request("POST", path, body=b"{}").status


@pytest.fixture
def repo(make_repo):
    """add_sub and identity_fp32 (load), corrupt (a version that fails to load: an ONNX
    file that is not ONNX) and broken_syntax (a config.pbtxt that does not parse)."""
    path = make_repo(["add_sub", "identity_fp32"], {"broken_syntax": BROKEN_SYNTAX})
    add_corrupt(path)
    return path


def test_explicit_unload_keeps_the_server_ready(repo, start_server):
    # Triton 2.51: 200 with A loaded, 200 after loading B, 200 after unloading B, and
    # 200 after unloading every model.
    server = start_server(repo, "--model-control-mode=explicit", "--load-model=add_sub")
    assert ready(server) == 200
    assert post(server, "/v2/repository/models/identity_fp32/load") == 200
    assert ready(server) == 200
    assert post(server, "/v2/repository/models/identity_fp32/unload") == 200
    assert ready(server) == 200
    assert post(server, "/v2/repository/models/add_sub/unload") == 200
    assert ready(server) == 200


def test_a_version_that_failed_to_load_makes_the_server_unready(repo, start_server):
    # Triton 2.51: the load answers 400 and readiness turns 400 until the model loads.
    server = start_server(repo, "--model-control-mode=explicit", "--load-model=add_sub")
    assert post(server, "/v2/repository/models/corrupt/load") == 400
    assert ready(server) == 400
    # Fixed and loaded again: ready (Triton 2.51, poll mode, a model fixed in place: 200).
    shutil.rmtree(os.path.join(repo, "corrupt"))
    shutil.copytree(os.path.join(EXAMPLE_MODELS, "add_sub", "1"), os.path.join(repo, "corrupt", "1"))
    with open(os.path.join(EXAMPLE_MODELS, "add_sub", "config.pbtxt")) as src:
        config = src.read().replace('name: "add_sub"', 'name: "corrupt"')
    with open(os.path.join(repo, "corrupt", "config.pbtxt"), "w") as f:
        f.write(config)
    assert post(server, "/v2/repository/models/corrupt/load") == 200
    assert ready(server) == 200


def test_unloading_a_failed_model_makes_the_server_ready_again(repo, start_server):
    # Deliberate difference: Triton 2.51 keeps the failed version's reason through an
    # unload (the unload answers 200, readiness stays 400 until a restart); Nereid
    # counts the unloaded model out, as it does every unloaded model.
    server = start_server(repo, "--model-control-mode=explicit", "--load-model=add_sub")
    assert post(server, "/v2/repository/models/corrupt/load") == 400
    assert post(server, "/v2/repository/models/corrupt/unload") == 200
    assert ready(server) == 200


def test_a_config_that_does_not_parse_does_not_hold_readiness(repo, start_server):
    # Triton 2.51: the load answers 500 ("failed to poll from model repository") and the
    # server stays ready: the model never reached the model lifecycle.
    server = start_server(repo, "--model-control-mode=explicit", "--load-model=add_sub")
    assert post(server, "/v2/repository/models/broken_syntax/load") == 500
    assert ready(server) == 200
    # Loading a model the repository does not have: Triton 2.51 answers 500 and stays
    # ready.
    assert post(server, "/v2/repository/models/nope/load") == 500
    assert ready(server) == 200


def test_startup_failures_in_none_mode(make_repo, start_server):
    # Triton 2.51 with --exit-on-error=false: a model whose version fails at start-up
    # keeps the server unready; one whose config does not parse does not.
    failing = make_repo(["add_sub"])
    add_corrupt(failing)
    server = start_server(failing, "--exit-on-error=false")
    assert ready(server) == 400
    server.kill()
    shutil.rmtree(failing)
    unparsable = make_repo(["add_sub"], {"broken_syntax": BROKEN_SYNTAX})
    server = start_server(unparsable, "--exit-on-error=false")
    assert ready(server) == 200


def test_without_strict_readiness_failures_do_not_matter(repo, start_server):
    # Triton 2.51 --strict-readiness=false: 200 after a failed load.
    server = start_server(
        repo, "--model-control-mode=explicit", "--load-model=add_sub", "--strict-readiness=false"
    )
    assert post(server, "/v2/repository/models/corrupt/load") == 400
    assert ready(server) == 200


def test_poll_mode_removals_and_additions(make_repo, start_server, poll):
    # Triton 2.51, --model-control-mode=poll --repository-poll-secs=1: 200 with two
    # models; 200 after one is removed; 400 once a failing model appears; 200 once it is
    # fixed in place.
    path = make_repo(["add_sub", "identity_fp32"])
    server = start_server(path, "--model-control-mode=poll", "--repository-poll-secs=1")
    assert ready(server) == 200
    shutil.rmtree(os.path.join(path, "identity_fp32"))
    poll(lambda: not server.http_client().is_model_ready("identity_fp32"), timeout=15,
         what="identity_fp32 to unload")
    assert ready(server) == 200
    add_corrupt(path)
    poll(lambda: ready(server) == 400, timeout=15, what="the failing model to be seen")
    # Deliberate difference: removing the failing model makes the server ready again;
    # Triton 2.51 keeps the removed model's failure and stays at 400 until a restart.
    shutil.rmtree(os.path.join(path, "corrupt"))
    poll(lambda: ready(server) == 200, timeout=15, what="readiness after the removal")
