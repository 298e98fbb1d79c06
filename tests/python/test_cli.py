"""Command line and process behaviour: flag parsing, bind addresses, signals."""

import signal

import pytest
import tritonclient.http as httpclient

from conftest import base_args


def run_to_exit(start_server, repo, args, timeout=15):
    server = start_server(repo, raw_args=args, wait=False)
    code = server.wait_exit(timeout)
    return code, server.log()


def test_unknown_flag(make_repo, start_server):
    repo = make_repo(["add_sub"])
    code, out = run_to_exit(start_server, repo, ["--model-repository", repo, "--bogus-flag"])
    assert code is not None and code != 0, out
    # tritonserver: "unrecognized option '--bogus-flag'"
    assert "--bogus-flag" in out or "bogus-flag" in out, out


def test_bad_flag_value(make_repo, start_server):
    repo = make_repo(["add_sub"])
    code, out = run_to_exit(start_server, repo, ["--model-repository", repo, "--http-port", "abc"])
    assert code is not None and code != 0, out
    # tritonserver: "Invalid option value. Got abc"
    assert "abc" in out, out


def test_wildcard_startup_model_must_be_alone(make_repo, start_server):
    repo = make_repo(["add_sub"])
    explicit = base_args(repo, ["--model-control-mode", "explicit"])
    code, out = run_to_exit(start_server, repo,
                            explicit + ["--load-model", "*", "--load-model", "add_sub"])
    assert code is not None and code != 0, out
    # Triton's core, and what its OpenAI frontend's tests expect.
    assert "Wildcard model name '*' must be the ONLY startup model if specified at all." in out
    # Given twice it is still alone, as in Triton's set of names.
    server = start_server(repo, "--model-control-mode", "explicit",
                          "--load-model", "*", "--load-model", "*")
    assert server.http_client().is_model_ready("add_sub")


def test_flag_equals_value_form(make_repo, start_server):
    repo = make_repo(["add_sub"])
    server = start_server(
        repo,
        raw_args=[
            f"--model-repository={repo}",
            "--http-port=0",
            "--grpc-port=0",
            "--metrics-port=0",
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--model-control-mode=explicit",
        ],
    )
    assert server.bound["http"][0] == "127.0.0.1"
    assert server.bound["grpc"][0] == "127.0.0.1"
    # explicit mode took effect: nothing is loaded until asked.
    resp = server.request("POST", "/v2/repository/index", {"ready": True})
    assert (resp.status, resp.json()) == (200, [])
    client = server.http_client()
    try:
        client.load_model("add_sub")
        assert client.is_model_ready("add_sub")
    finally:
        client.close()


def test_unreadable_repository_with_exit_on_error_false_serves_not_live(tmp_path, start_server):
    # tritonserver keeps running when its repository cannot be read and
    # --exit-on-error=false: neither live nor ready, metadata still answered
    # (L0_lifecycle test_parse_error_noexit).
    missing = str(tmp_path / "xyzx")
    server = start_server(missing, "--exit-on-error=false")
    assert "--model-repository " + missing + ": not a readable directory" in server.log()
    client = server.http_client()
    try:
        assert not client.is_server_live()
        assert not client.is_server_ready()
        assert client.get_server_metadata()["name"] == "triton"
    finally:
        client.close()
    code, out = run_to_exit(start_server, missing, ["--model-repository", missing])
    assert code is not None and code != 0, out


def test_default_bind_address_is_all_interfaces(make_repo, start_server):
    # Triton binds 0.0.0.0 unless told otherwise, and says so in the log line.
    repo = make_repo(["add_sub"])
    server = start_server(
        repo,
        raw_args=["--model-repository", repo, "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"],
    )
    assert server.bound["http"][0] == "0.0.0.0"
    assert server.bound["grpc"][0] == "0.0.0.0"
    assert server.bound["metrics"][0] == "0.0.0.0"
    assert all(port > 0 for _, port in server.bound.values())
    assert len({port for _, port in server.bound.values()}) == 3
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        assert client.is_server_ready()
    finally:
        client.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_exits_cleanly(make_repo, start_server, sig):
    server = start_server(make_repo(["add_sub"]))
    client = server.http_client()
    assert client.is_server_live()
    client.close()
    server.signal(sig)
    code = server.wait_exit(10)
    assert code == 0, f"exit code {code}\n{server.log()}"


def test_shutdown_ends_open_streams(make_repo, start_server, add_sub_io):
    # A client that keeps its ModelStreamInfer stream open must not hold the server up:
    # at SIGTERM the stream stops taking requests, answers what it has, and ends with
    # UNAVAILABLE, so a client waiting for answers to requests sent later is told (as
    # Triton's cancelled RPC tells L0_grpc_state_cleanup's client) instead of hanging.
    import queue

    import numpy as np
    import tritonclient.grpc as grpcclient

    server = start_server(make_repo(["add_sub"]))
    client = server.grpc_client()
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    a = np.ones((1, 4), dtype=np.float32)
    client.async_stream_infer("add_sub", add_sub_io(grpcclient, a, a))
    result, error = answers.get(timeout=10)
    assert error is None
    assert np.array_equal(result.as_numpy("OUTPUT0"), a + a)
    server.signal(signal.SIGTERM)
    result, error = answers.get(timeout=10)
    assert result is None
    assert error.status() == "StatusCode.UNAVAILABLE", error
    assert "server is shutting down" in error.message()
    code = server.wait_exit(10)
    assert code == 0, f"exit code {code}\n{server.log()}"
    client.stop_stream(cancel_requests=True)
    client.close()


def test_flags_of_tritons_qa_scripts_are_accepted(make_repo, start_server):
    repo = make_repo(["add_sub"])
    server = start_server(
        repo,
        "--backend-directory",
        "/opt/tritonserver/backends",
        "--cuda-virtual-address-size=0:1073741824",
        "--backend-config=python,shm-default-byte-size=1048576",
    )
    assert server.request("GET", "/v2/health/ready").status == 200


def test_cuda_virtual_address_size_format(make_repo, start_server):
    repo = make_repo(["add_sub"])
    code, out = run_to_exit(
        start_server, repo, ["--model-repository", repo, "--cuda-virtual-address-size", "0"]
    )
    assert code is not None and code != 0, out
    # tritonserver's ParsePairOption message.
    assert "argument requires format <first>:<second>. Found: 0" in out, out
