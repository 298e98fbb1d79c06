"""Operator failure modes (issue 14): storage that never answers, a closed log pipe.
Each test reproduces a failure that used to freeze or kill the server, against the
real binary."""

import os
import re
import signal
import subprocess
import threading
import time
import urllib.request

import numpy as np
import tritonclient.http as httpclient

from conftest import add_sub_config, base_args, nereid_bin, wait_for


def _fifo_model(repo, name, fifo_file):
    """A model directory named `name` whose `fifo_file` (relative) is a FIFO nobody writes:
    opening it for reading blocks forever, as a file on a stalled mount does."""
    model = os.path.join(repo, name)
    os.makedirs(os.path.join(model, "1"), exist_ok=True)
    if fifo_file != "config.pbtxt":
        with open(os.path.join(model, "config.pbtxt"), "w") as f:
            f.write(add_sub_config(name))
    os.mkfifo(os.path.join(model, fifo_file))


def _serving(srv):
    """add_sub answers and the metrics port answers."""
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    client = srv.http_client()
    try:
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            inp = httpclient.InferInput(name, [2, 4], "FP32")
            inp.set_data_from_numpy(a)
            inputs.append(inp)
        result = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    finally:
        client.close()
    assert "nv_inference_request_success" in srv.metrics()


def _sigterm_exits(srv, within):
    started = time.monotonic()
    srv.signal(signal.SIGTERM)
    code = srv.wait_exit(within)
    assert code == 0, f"still running {within}s after SIGTERM:\n{srv.log(last=30)}"
    return time.monotonic() - started


def test_a_fifo_config_is_refused_at_once_in_explicit_mode(start_server, make_repo):
    repo = make_repo(["add_sub"])
    _fifo_model(repo, "stuck", "config.pbtxt")
    srv = start_server(repo, "--model-control-mode", "explicit", "--load-model", "add_sub")
    started = time.monotonic()
    resp = srv.request("POST", "/v2/repository/models/stuck/load")
    # Triton's status for a configuration that cannot be read ("failed to poll").
    assert resp.status == 500, resp
    assert "config.pbtxt: not a regular file" in resp.json()["error"], resp
    assert time.monotonic() - started < 5
    _serving(srv)
    _sigterm_exits(srv, 10)


def test_a_load_stuck_on_storage_times_out_while_the_server_answers(start_server, make_repo):
    repo = make_repo(["add_sub"])
    _fifo_model(repo, "stuck", os.path.join("1", "model.onnx"))
    srv = start_server(
        repo,
        "--model-control-mode", "explicit", "--load-model", "add_sub",
        "--model-load-timeout-secs", "3", "--exit-timeout-secs", "2",
    )
    answer = {}

    def load():
        answer["response"] = srv.request("POST", "/v2/repository/models/stuck/load")

    loader = threading.Thread(target=load)
    started = time.monotonic()
    loader.start()
    time.sleep(0.5)
    # The stuck load blocks neither inference nor metrics nor the index.
    _serving(srv)
    index = srv.request("POST", "/v2/repository/index", body={})
    assert index.status == 200, index
    loader.join(20)
    elapsed = time.monotonic() - started
    resp = answer["response"]
    assert resp.status in (400, 500, 503), resp
    assert "timed out after 3s loading model 'stuck'" in resp.json()["error"], resp
    assert 2.5 < elapsed < 10, elapsed

    # The first read is still stuck: a retry fails at once instead of adding a thread.
    again = srv.request("POST", "/v2/repository/models/stuck/load")
    assert "has not returned yet" in again.json()["error"], again
    _serving(srv)
    # Shutdown does not wait for the thread stuck on the FIFO.
    assert _sigterm_exits(srv, 10) < 8


def test_poll_mode_serves_through_a_model_stuck_on_storage(start_server, make_repo):
    repo = make_repo(["add_sub"])
    _fifo_model(repo, "stuck", os.path.join("1", "model.onnx"))
    srv = start_server(
        repo,
        "--model-control-mode", "poll", "--repository-poll-secs", "1",
        "--model-load-timeout-secs", "2", "--exit-timeout-secs", "2", "--exit-on-error", "false",
    )
    _serving(srv)

    def stuck_reason():
        rows = srv.request("POST", "/v2/repository/index", body={}).json()
        row = next((r for r in rows if r["name"] == "stuck"), {})
        return row.get("reason", "")

    assert "timed out after 2s loading model 'stuck'" in wait_for(
        stuck_reason, timeout=10, what="the stuck model's reason"
    )
    # A few poll cycles later the server still answers and nothing piled up.
    time.sleep(2.5)
    _serving(srv)
    assert _sigterm_exits(srv, 10) < 8


def test_sigterm_during_a_stuck_startup_load_exits(start_server, make_repo):
    repo = make_repo(["add_sub"])
    _fifo_model(repo, "stuck", os.path.join("1", "model.onnx"))
    srv = start_server(repo, "--exit-on-error", "false", wait=False)
    wait_for(lambda: "ONNX Runtime loaded" in srv.log(), timeout=10, what="start-up")
    time.sleep(0.5)
    started = time.monotonic()
    srv.signal(signal.SIGTERM)
    assert srv.wait_exit(10) == 0, srv.log(last=30)
    assert time.monotonic() - started < 5


def test_a_closed_log_pipe_does_not_stop_the_server(make_repo):
    """Like `nereid ... 2>&1 | head`: the log's reader goes away once the server is up."""
    repo = make_repo(["add_sub"])
    proc = subprocess.Popen(
        [
            nereid_bin(),
            *base_args(repo, ["--model-control-mode", "explicit", "--load-model", "add_sub"]),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        ports = {}
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace")
            for key, label in (("http", "HTTPService"), ("metrics", "Metrics Service")):
                # `... "Started HTTPService at 0.0.0.0:8000"`: Triton's quoted message.
                found = re.search(rf"Started {label} at \S+:(\d+)", line)
                if found:
                    ports[key] = int(found.group(1))
            if "server started" in line:
                break
        proc.stdout.close()
        srv_http = f"127.0.0.1:{ports['http']}"
        client = httpclient.InferenceServerClient(srv_http)
        a = np.ones((1, 4), dtype=np.float32)
        for _ in range(20):
            inputs = []
            for name in ("INPUT0", "INPUT1"):
                inp = httpclient.InferInput(name, [1, 4], "FP32")
                inp.set_data_from_numpy(a)
                inputs.append(inp)
            assert client.infer("add_sub", inputs).as_numpy("OUTPUT0").tolist() == [[2.0] * 4]
            # Each reload logs INFO lines into the closed pipe.
            client.load_model("add_sub")
        client.close()
        assert proc.poll() is None, f"exited with {proc.returncode}"
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{ports['metrics']}/metrics").read()
        dropped = [
            line for line in metrics.decode().splitlines()
            if line.startswith("nereid_log_lines_dropped_total ")
        ]
        assert dropped and int(dropped[0].split()[1]) > 0, dropped
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _shm_add_sub(client, region, nbytes):
    inputs = []
    for index, name in enumerate(("INPUT0", "INPUT1")):
        inp = httpclient.InferInput(name, [1, 4], "FP32")
        inp.set_shared_memory(region, nbytes, offset=index * nbytes)
        inputs.append(inp)
    return client.infer("add_sub", inputs)


def test_a_client_truncating_its_region_gets_an_error_and_the_server_lives(
    start_server, make_repo
):
    import tritonclient.utils.shared_memory as shm
    from tritonclient.utils import InferenceServerException

    srv = start_server(make_repo(["add_sub"]), "--allow-client-shm=true")
    client = srv.http_client()
    key = f"/nereid_trunc_{os.getpid()}"
    handle = shm.create_shared_memory_region("trunc", key, 3 * 4096)
    try:
        a = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
        shm.set_shared_memory_region(handle, [a, a])
        client.register_system_shared_memory("trunc", key, 3 * 4096)
        assert _shm_add_sub(client, "trunc", 16).as_numpy("OUTPUT0").tolist() == [[2, 4, 6, 8]]

        # The client shrinks its own object: touching the lost pages used to raise SIGBUS.
        os.truncate(f"/dev/shm{key}", 0)
        try:
            _shm_add_sub(client, "trunc", 16)
            raise AssertionError("a truncated region was read")
        except InferenceServerException as e:
            assert e.status() == "400", e
            assert "shared memory region 'trunc' is no longer usable" in e.message(), e
        assert srv.proc.poll() is None
        _serving(srv)

        # Grown again and registered again, it works.
        client.unregister_system_shared_memory("trunc")
        os.truncate(f"/dev/shm{key}", 3 * 4096)
        shm.set_shared_memory_region(handle, [a, a])
        client.register_system_shared_memory("trunc", key, 3 * 4096)
        assert _shm_add_sub(client, "trunc", 16).as_numpy("OUTPUT0").tolist() == [[2, 4, 6, 8]]
    finally:
        client.close()
        shm.destroy_shared_memory_region(handle)


def test_registered_regions_are_capped(start_server, make_repo):
    import tritonclient.utils.shared_memory as shm
    from tritonclient.utils import InferenceServerException

    srv = start_server(
        make_repo(["add_sub"]),
        "--shm-max-regions",
        "4",
        "--shm-max-total-bytes",
        "100000",
        "--allow-client-shm=true",
    )
    client, grpc = srv.http_client(), srv.grpc_client()
    key = f"/nereid_cap_{os.getpid()}"
    handle = shm.create_shared_memory_region("cap", key, 65536)

    def refused(register, name, size, why):
        try:
            register(name, key, size)
        except InferenceServerException as e:
            assert why in e.message(), e
            return
        raise AssertionError(f"{name} was registered")

    try:
        # One object registered many times: each registration is a mapping.
        for i in range(4):
            client.register_system_shared_memory(f"cap{i}", key, 64)
        for register in (client.register_system_shared_memory, grpc.register_system_shared_memory):
            refused(register, "cap4", 64, "4 regions are registered, the most this server allows (--shm-max-regions)")
        client.unregister_system_shared_memory("cap0")
        client.unregister_system_shared_memory("cap1")
        grpc.register_system_shared_memory("big1", key, 65536)
        refused(client.register_system_shared_memory, "big2", 65536, "(--shm-max-total-bytes; 65664 registered)")
        _serving(srv)
    finally:
        client.unregister_system_shared_memory()
        client.close()
        grpc.close()
        shm.destroy_shared_memory_region(handle)


def test_a_huge_request_id_in_an_error_still_reaches_the_grpc_client(server):
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = server.grpc_client()
    try:
        inp = grpcclient.InferInput("INPUT0", [1, 5], "FP32")
        inp.set_data_from_numpy(np.zeros((1, 5), np.float32))
        other = grpcclient.InferInput("INPUT1", [1, 5], "FP32")
        other.set_data_from_numpy(np.zeros((1, 5), np.float32))
        try:
            client.infer("add_sub", [inp, other], request_id="x" * 10000)
            raise AssertionError("a wrong shape was accepted")
        except InferenceServerException as e:
            # Used to be RESOURCE_EXHAUSTED: the echoed id overflowed the trailer.
            assert e.status() == "StatusCode.INVALID_ARGUMENT", e
            assert "unexpected shape for input 'INPUT0'" in e.message(), e
            assert "x" * 256 + "...] " in e.message(), e.message()[:300]
    finally:
        client.close()


def test_a_name_given_twice_is_a_400(server):
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
            {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
        ]
    }
    resp = server.request("POST", "/v2/models/add_sub/infer", body=body)
    assert resp.status == 400, resp
    assert resp.json()["error"] == (
        "[request id: <id_unknown>] input 'INPUT0' already exists in request"
    )
    body["inputs"][1]["name"] = "INPUT1"
    body["outputs"] = [{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]
    resp = server.request("POST", "/v2/models/add_sub/infer", body=body)
    assert resp.status == 400, resp
    assert resp.json()["error"] == (
        "[request id: <id_unknown>] output 'OUTPUT0' already exists in request"
    )


def test_a_load_override_is_checked_against_the_model(start_server, make_repo):
    import copy
    import json

    srv = start_server(
        make_repo(["add_sub"]), "--model-control-mode", "explicit", "--load-model", "add_sub"
    )
    good = json.loads(srv.request("GET", "/v2/models/add_sub/config").body)
    cases = [
        (("input", 0, "name", "INPUTX"),
         "unexpected inference input 'INPUTX', allowed inputs are: INPUT0, INPUT1"),
        (("input", 0, "data_type", "TYPE_INT32"),
         "unable to load model 'add_sub', configuration expects datatype TYPE_INT32 for input 'INPUT0', model provides TYPE_FP32"),
        (("output", 1, "name", "OUTX"),
         "unexpected inference output 'OUTX', allowed outputs are: OUTPUT0, OUTPUT1"),
    ]
    for (section, index, field, value), message in cases:
        config = copy.deepcopy(good)
        config[section][index][field] = value
        resp = srv.request(
            "POST", "/v2/repository/models/add_sub/load",
            body={"parameters": {"config": json.dumps(config)}},
        )
        assert resp.status == 400, resp
        assert message in resp.json()["error"], resp
        # The loaded version keeps serving.
        _serving(srv)
