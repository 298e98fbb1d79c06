"""Triton's in-process frontends (`tritonfrontend` 2.73: KServeHttp, KServeGrpc, Metrics)
started from Python over an in-process server on Nereid's libtritonserver.so, driven by
tritonclient.http / tritonclient.grpc and plain HTTP for the metrics.

tritonfrontend cannot report the port of a port-0 binding, so each frontend gets a port
found free on 127.0.0.1 just before.
"""

import queue
import socket
import urllib.request

import numpy as np
import pytest

from conftest import (
    free_port,
    python_backend_directory,
    remove_shm_regions,
    require_onnxruntime,
    shm_prefix,
    wait_for,
    write_repository,
)

pytestmark = pytest.mark.timeout(300)

F32 = np.float32
SERVER_ID = "nereid-tritonfrontend"


@pytest.fixture(scope="module")
def tritonfrontend(tritonserver):
    try:
        import tritonfrontend as module
    except ModuleNotFoundError as e:
        pytest.fail(f"the tritonfrontend wheel is not installed: {e}")
    return module


@pytest.fixture(scope="module")
def backend_dir():
    try:
        return python_backend_directory()
    except (pytest.skip.Exception, pytest.fail.Exception):  # the tests that need it say why
        return None


@pytest.fixture(scope="module")
def server(tritonserver, backend_dir, tmp_path_factory):
    require_onnxruntime()
    names = ["add_sub", "identity_fp32"] + (["stream_py"] if backend_dir else [])
    repo = write_repository(tmp_path_factory.mktemp("frontend_models"), names)
    prefix = shm_prefix() + "fe_"
    options = tritonserver.Options(
        server_id=SERVER_ID,
        model_repository=repo,
        model_control_mode=tritonserver.ModelControlMode.EXPLICIT,
        log_error=True,
        exit_timeout=10,
        backend_configuration={"python": {"shm-region-prefix-name": prefix}},
    )
    if backend_dir:
        options.backend_directory = backend_dir
    srv = tritonserver.Server(options).start(wait_until_ready=True, timeout=60)
    try:
        srv.load("add_sub")
        yield srv
    finally:
        srv.stop()
        remove_shm_regions(prefix)


def port_open(port):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def start_frontend(kind, server, **options):
    """Starts a frontend of `kind` (KServeHttp, KServeGrpc, Metrics) on a free port;
    returns (frontend, port)."""
    for _ in range(5):
        port = free_port()
        frontend = kind(server, kind.Options(address="127.0.0.1", port=port, **options))
        try:
            frontend.start()
        except Exception:  # the port was taken in between: another one
            continue
        wait_for(lambda: port_open(port), timeout=20, what=f"{kind.__name__} on port {port}")
        return frontend, port
    raise AssertionError(f"{kind.__name__} did not start on any of 5 free ports")


@pytest.fixture(scope="module")
def http_url(server, tritonfrontend):
    frontend, port = start_frontend(tritonfrontend.KServeHttp, server, thread_count=2)
    yield f"127.0.0.1:{port}"
    frontend.stop()
    wait_for(lambda: not port_open(port), timeout=20, what="KServeHttp to close its port")


@pytest.fixture(scope="module")
def grpc_url(server, tritonfrontend):
    frontend, port = start_frontend(tritonfrontend.KServeGrpc, server)
    yield f"127.0.0.1:{port}"
    frontend.stop()
    wait_for(lambda: not port_open(port), timeout=20, what="KServeGrpc to close its port")


@pytest.fixture(scope="module")
def stream_loaded(server, backend_dir):
    if not backend_dir:
        python_backend_directory()  # skips (fails under CI) with the reason
    return server.load("stream_py")


def add_sub_request(module, batch=1, **data_options):
    a = np.arange(4 * batch, dtype=F32).reshape(batch, 4) - 1.0
    b = np.full((batch, 4), 2.0, dtype=F32)
    inputs = [module.InferInput("INPUT0", [batch, 4], "FP32"), module.InferInput("INPUT1", [batch, 4], "FP32")]
    inputs[0].set_data_from_numpy(a, **data_options)
    inputs[1].set_data_from_numpy(b, **data_options)
    return a, b, inputs


def test_http_health_and_metadata(http_url):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(http_url)
    try:
        assert client.is_server_live()
        assert client.is_server_ready()
        assert client.get_server_metadata()["name"] == SERVER_ID
        assert client.is_model_ready("add_sub")
        metadata = client.get_model_metadata("add_sub")
        assert metadata["name"] == "add_sub" and metadata["versions"] == ["1"]
        assert [(i["name"], i["datatype"], i["shape"]) for i in metadata["inputs"]] == [
            ("INPUT0", "FP32", [-1, 4]), ("INPUT1", "FP32", [-1, 4])]
        config = client.get_model_config("add_sub")
        assert config["max_batch_size"] == 8
        index = {(m["name"], m.get("state")) for m in client.get_model_repository_index()}
        assert ("add_sub", "READY") in index
    finally:
        client.close()


def test_http_infer(http_url):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(http_url)
    try:
        for binary in (True, False):
            a, b, inputs = add_sub_request(httpclient, batch=2, binary_data=binary)
            outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
                       httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary)]
            result = client.infer("add_sub", inputs, outputs=outputs, request_id="http-1")
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
            assert result.get_response()["id"] == "http-1"
        stats = client.get_inference_statistics("add_sub")["model_stats"][0]
        assert stats["name"] == "add_sub" and stats["inference_stats"]["success"]["count"] >= 2
    finally:
        client.close()


def test_http_model_control(http_url, server):
    """Load and unload through the HTTP repository API of the in-process frontend; the
    server stays ready after the unload."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(http_url)
    try:
        client.load_model("identity_fp32")
        assert client.is_model_ready("identity_fp32")
        x = np.array([[0.25, -1.0, 8.0]], dtype=F32)
        inp = httpclient.InferInput("INPUT0", [1, 3], "FP32")
        inp.set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer("identity_fp32", [inp]).as_numpy("OUTPUT0"), x)
        client.unload_model("identity_fp32")
        wait_for(lambda: not client.is_model_ready("identity_fp32"), timeout=30, what="identity_fp32 unloaded")
        assert client.is_server_ready()
        assert server.ready()
    finally:
        client.close()


def test_grpc_health_and_metadata(grpc_url):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        assert client.is_server_live()
        assert client.is_server_ready()
        assert client.get_server_metadata(as_json=True)["name"] == SERVER_ID
        assert client.is_model_ready("add_sub")
        metadata = client.get_model_metadata("add_sub", as_json=True)
        assert metadata["platform"] == "onnxruntime_onnx"
        assert [(i["name"], i["datatype"], [int(d) for d in i["shape"]]) for i in metadata["inputs"]] == [
            ("INPUT0", "FP32", [-1, 4]), ("INPUT1", "FP32", [-1, 4])]
        config = client.get_model_config("add_sub", as_json=True)["config"]
        assert int(config["max_batch_size"]) == 8
    finally:
        client.close()


def test_grpc_infer(grpc_url):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        a, b, inputs = add_sub_request(grpcclient, batch=3)
        result = client.infer("add_sub", inputs, request_id="grpc-1")
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        assert result.get_response().id == "grpc-1"

        done = queue.Queue()
        client.async_infer("add_sub", inputs, callback=lambda result, error: done.put((result, error)))
        result, error = done.get(timeout=30)
        assert error is None
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    finally:
        client.close()


def test_grpc_stream_decoupled(grpc_url, stream_loaded):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(grpc_url)
    results = queue.Queue()
    try:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        n = grpcclient.InferInput("N", [1], "INT32")
        n.set_data_from_numpy(np.array([4], dtype=np.int32))
        client.async_stream_infer("stream_py", [n], request_id="s-1")
        values = []
        for _ in range(4):
            result, error = results.get(timeout=30)
            assert error is None, error
            values.append(int(result.as_numpy("OUT")[0]))
        assert values == [0, 1, 2, 3]
        client.stop_stream()
        assert results.empty()
    finally:
        client.close()


def test_metrics_frontend(server, tritonfrontend, http_url):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(http_url)
    try:
        _, _, inputs = add_sub_request(httpclient)
        client.infer("add_sub", inputs)
    finally:
        client.close()
    frontend, port = start_frontend(tritonfrontend.Metrics, server)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            assert response.status == 200
            text = response.read().decode()
    finally:
        frontend.stop()
    lines = [line for line in text.splitlines() if line.startswith('nv_inference_request_success{model="add_sub"')]
    assert lines, text[:2000]
    assert int(float(lines[0].split()[-1])) >= 1


def test_frontends_stop_and_restart(server, tritonfrontend):
    """A frontend stopped frees its port; a new one serves again (as context managers)."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    port = free_port()
    with tritonfrontend.KServeHttp(server, tritonfrontend.KServeHttp.Options(address="127.0.0.1", port=port)):
        wait_for(lambda: port_open(port), timeout=20, what="KServeHttp")
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
        assert client.is_server_live()
        assert client.is_model_ready("add_sub")
        client.close()
    wait_for(lambda: not port_open(port), timeout=20, what="KServeHttp to close its port")

    grpc_port = free_port()
    with tritonfrontend.KServeGrpc(server, tritonfrontend.KServeGrpc.Options(address="127.0.0.1", port=grpc_port)):
        wait_for(lambda: port_open(grpc_port), timeout=20, what="KServeGrpc")
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        a, b, inputs = add_sub_request(grpcclient)
        np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT1"), a - b)
        client.close()
    wait_for(lambda: not port_open(grpc_port), timeout=20, what="KServeGrpc to close its port")
