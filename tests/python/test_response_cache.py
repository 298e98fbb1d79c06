"""Response cache (reference section 3): `--cache-config local,size=N` and
`redis,host=...,port=...`, per-model `response_cache { enable: true }`,
statistics and metrics, with tritonclient over HTTP and gRPC.

Deliberate differences from Triton 2.51 (each marked again where tested):
- the key includes every input's datatype and shape, and the whole key is
  compared, so a hash collision never returns another request's answer (the
  collision itself is forced in the Rust unit tests of the local cache);
- the entry holds every output, so a request for OUTPUT0 after one for
  OUTPUT1 gets OUTPUT0 (Triton returned the cached OUTPUT1);
- failed inferences are never cached (Triton answered the repeat with 200
  and no outputs);
- identical requests that miss at the same moment execute once.

The Redis tests start their own `redis-server` (Debian's package) on a free
port with persistence off.
"""

import os
import shutil
import socket
import subprocess
import threading
import time

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from onnx import TensorProto, helper, numpy_helper

from conftest import add_sub_config, add_sub_inputs, wait_for

F32 = np.float32
A = np.array([[1.0, 2.0, 3.0, 4.0]], F32)
B = np.array([[0.5, -1.0, 10.0, 2.25]], F32)
CACHED = add_sub_config(name="add_sub", extra="response_cache { enable: true }\n")
UNCACHED = add_sub_config(name="add_sub_nocache")


def cache_stats(client, model="add_sub"):
    s = client.get_inference_statistics(model)["model_stats"][0]
    i = s["inference_stats"]
    return {
        "hit": i["cache_hit"]["count"],
        "miss": i["cache_miss"]["count"],
        "success": i["success"]["count"],
        "exec": s["execution_count"],
        "inferences": s["inference_count"],
    }


def metric(srv, line_start):
    for line in srv.metrics().splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture
def cached_server(make_repo, start_server):
    repo = make_repo([], {"add_sub": CACHED, "add_sub_nocache": UNCACHED})
    return start_server(repo, "--cache-config", "local,size=1048576", "--allow-client-shm=true")


def infer(client, a=A, b=B, outputs=None, model="add_sub", version=""):
    mod = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    requested = None if outputs is None else [mod.InferRequestedOutput(o) for o in outputs]
    return client.infer(model, add_sub_inputs(mod, a, b), outputs=requested, model_version=version)


# --- hits and misses ------------------------------------------------------------


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_identical_request_hits_without_running_the_model(cached_server, proto):
    client = cached_server.http_client() if proto == "http" else cached_server.grpc_client()
    first = infer(client)
    second = infer(client)
    for name in ("OUTPUT0", "OUTPUT1"):
        assert first.as_numpy(name).tobytes() == second.as_numpy(name).tobytes()
    np.testing.assert_array_equal(second.as_numpy("OUTPUT0"), A + B)
    # As in Triton: a hit counts as a success, not as an inference or execution.
    assert cache_stats(cached_server.http_client()) == {
        "hit": 1, "miss": 1, "success": 2, "exec": 1, "inferences": 1,
    }


def test_http_and_grpc_and_shared_memory_share_entries(cached_server):
    http, grpc = cached_server.http_client(), cached_server.grpc_client()
    infer(http)
    np.testing.assert_array_equal(infer(grpc).as_numpy("OUTPUT1"), A - B)
    # The same bytes through a system shared-memory region hit the same entry.
    region = shm.create_shared_memory_region("cache_in", "/nereid_cache_in", 32)
    try:
        shm.set_shared_memory_region(region, [A, B])
        http.register_system_shared_memory("cache_in", "/nereid_cache_in", 32)
        inputs = [httpclient.InferInput("INPUT0", [1, 4], "FP32"), httpclient.InferInput("INPUT1", [1, 4], "FP32")]
        inputs[0].set_shared_memory("cache_in", 16)
        inputs[1].set_shared_memory("cache_in", 16, 16)
        result = http.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
        http.unregister_system_shared_memory("cache_in")
    finally:
        shm.destroy_shared_memory_region(region)
    assert cache_stats(http)["hit"] == 2
    assert cache_stats(http)["exec"] == 1


def test_any_changed_input_byte_misses(cached_server):
    client = cached_server.http_client()
    infer(client)
    changed = A.copy()
    changed.view(np.uint8)[0, 0] ^= 1  # one bit of one byte
    result = infer(client, a=changed)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), changed + B)
    # A two-row batch is another key too (same bytes with another shape: see
    # test_same_bytes_other_shape_misses).
    infer(client, a=np.vstack([A, A]), b=np.vstack([B, B]))
    assert cache_stats(client) == {"hit": 0, "miss": 3, "success": 3, "exec": 3, "inferences": 4}


def test_same_bytes_other_shape_misses(make_repo, start_server):
    config = (
        'name: "identity_fp32"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        "response_cache { enable: true }\n"
    )
    repo = make_repo(["identity_fp32"], {"identity_fp32": config})
    srv = start_server(repo, "--cache-config=local,size=65536")
    client = srv.grpc_client()
    data = np.arange(4, dtype=F32)

    def send(shape):
        inp = grpcclient.InferInput("INPUT0", list(shape), "FP32")
        inp.set_data_from_numpy(data.reshape(shape))
        return client.infer("identity_fp32", [inp]).as_numpy("OUTPUT0")

    assert send((1, 4)).shape == (1, 4)
    # Triton's key ignores the shape: this would have come back as [1, 4].
    assert send((2, 2)).shape == (2, 2)
    assert send((1, 4)).shape == (1, 4)
    stats = cache_stats(srv.http_client(), "identity_fp32")
    assert (stats["hit"], stats["miss"]) == (1, 2)


def test_versions_have_separate_entries(make_repo, start_server, tmp_path):
    config = CACHED + "version_policy: { all: {} }\n"
    repo = make_repo([], {"add_sub": config})
    shutil.copytree(os.path.join(repo, "add_sub", "1"), os.path.join(repo, "add_sub", "2"))
    srv = start_server(repo, "--cache-config", "local,size=65536")
    client = srv.http_client()
    infer(client, version="1")
    result = infer(client, version="2")
    assert result.get_response()["model_version"] == "2"
    infer(client, version="2")
    hits = [
        s["inference_stats"]["cache_hit"]["count"]
        for s in sorted(client.get_inference_statistics("add_sub")["model_stats"], key=lambda s: s["version"])
    ]
    assert hits == [0, 1]


def test_model_without_enable_never_hits(cached_server):
    client = cached_server.http_client()
    for _ in range(3):
        infer(client, model="add_sub_nocache")
    assert cache_stats(client, "add_sub_nocache") == {
        "hit": 0, "miss": 0, "success": 3, "exec": 3, "inferences": 3,
    }
    metrics = cached_server.metrics()
    assert 'nv_cache_num_hits_per_model{model="add_sub",version="1"}' in metrics
    assert 'model="add_sub_nocache"' not in "\n".join(
        l for l in metrics.splitlines() if l.startswith("nv_cache_")
    )


def test_enabled_model_without_server_cache_runs_normally(make_repo, start_server):
    srv = start_server(make_repo([], {"add_sub": CACHED}))
    client = srv.http_client()
    infer(client)
    infer(client)
    assert cache_stats(client) == {"hit": 0, "miss": 0, "success": 2, "exec": 2, "inferences": 2}


def test_any_output_subset_is_served_from_the_entry(cached_server):
    client = cached_server.grpc_client()
    only1 = infer(client, outputs=["OUTPUT1"])
    assert only1.as_numpy("OUTPUT0") is None
    # Triton returned the cached OUTPUT1 here.
    only0 = infer(client, outputs=["OUTPUT0"])
    np.testing.assert_array_equal(only0.as_numpy("OUTPUT0"), A + B)
    assert only0.as_numpy("OUTPUT1") is None
    both = infer(cached_server.http_client(), outputs=["OUTPUT1", "OUTPUT0"])
    assert [o["name"] for o in both.get_response()["outputs"]] == ["OUTPUT1", "OUTPUT0"]
    assert cache_stats(cached_server.http_client())["exec"] == 1


RESHAPE3 = (
    'name: "reshape3"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
    "response_cache { enable: true }\n"
)


def reshape3_repo(make_repo):
    """A model that fails when it runs: any input but 3 elements can't be reshaped
    to [3] (ONNX Runtime's error), while the request itself is valid."""
    repo = make_repo([], {"reshape3": RESHAPE3})
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["INPUT0", "shape"], ["OUTPUT0"], name="reshape")],
        "reshape3",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.array([3], np.int64), "shape")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, os.path.join(repo, "reshape3", "1", "model.onnx"))
    return repo


def test_failed_inferences_are_not_cached(make_repo, start_server, error_of):
    srv = start_server(reshape3_repo(make_repo), "--cache-config", "local,size=65536")
    client = srv.http_client()
    inp = httpclient.InferInput("INPUT0", [2], "FP32")
    inp.set_data_from_numpy(np.array([1.0, 2.0], dtype=np.float32))
    for _ in range(2):
        e = error_of(client.infer, "reshape3", [inp])
        assert "onnx runtime error" in e.message()
    s = client.get_inference_statistics("reshape3")["model_stats"][0]
    assert s["inference_stats"]["fail"]["count"] == 2
    assert s["inference_stats"]["cache_hit"]["count"] == 0
    assert s["inference_stats"]["cache_miss"]["count"] == 0
    assert metric(srv, "nv_cache_num_entries") == 0


def test_identical_concurrent_misses_execute_once(make_repo, start_server):
    # The batcher holds requests for 300 ms, so all four are in flight together.
    config = add_sub_config(
        extra="response_cache { enable: true }\n"
        "dynamic_batching { preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 300000 }\n"
    )
    srv = start_server(make_repo([], {"add_sub": config}), "--cache-config", "local,size=65536")
    results = [None] * 4

    def one(i):
        with srv.grpc_client() as c:
            results[i] = infer(c).as_numpy("OUTPUT0")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        np.testing.assert_array_equal(r, A + B)
    # Triton batches all four into one execution of batch 4; here the model runs once
    # for one request and the other three share its answer.
    assert cache_stats(srv.http_client()) == {"hit": 3, "miss": 1, "success": 4, "exec": 1, "inferences": 1}


# --- the local cache's budget and metrics ------------------------------------------


def test_small_cache_evicts_and_stays_in_budget(make_repo, start_server):
    srv = start_server(make_repo([], {"add_sub": CACHED}), "--cache-config", "local,size=2048")
    client = srv.http_client()
    for i in range(12):
        infer(client, a=A + i)
    assert metric(srv, "nv_cache_num_evictions") > 0
    assert 0 < metric(srv, "nv_cache_util") <= 1
    entries = metric(srv, "nv_cache_num_entries")
    assert 1 <= entries < 12
    # The newest entry is still there, the oldest is gone.
    infer(client, a=A + 11)
    infer(client, a=A)
    s = cache_stats(client)
    assert (s["hit"], s["exec"]) == (1, 13)
    assert metric(srv, "nv_cache_num_hits") == 1
    assert metric(srv, "nv_cache_num_lookups") == 14
    assert metric(srv, 'nv_cache_num_misses_per_model{model="add_sub",version="1"}') == 13


def test_a_cache_too_small_for_any_entry_starts_and_misses(make_repo, start_server):
    # Triton's local cache starts from 192 bytes and then stores nothing that size
    # cannot hold: every request misses and still runs (L0_response_cache's
    # insertion-failure test starts with local,size=200).
    srv = start_server(make_repo([], {"add_sub": CACHED}), "--cache-config", "local,size=200")
    client = srv.http_client()
    for _ in range(2):
        infer(client)
    s = cache_stats(client)
    # Triton counts a refused insertion as a miss.
    assert (s["hit"], s["miss"], s["exec"]) == (0, 2, 2)
    assert metric(srv, "nv_cache_num_entries") == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--cache-config", "local,size=100"], "Failed to initialize LocalCache: size 100 is too small"),
        (["--cache-config", "local,foo=1"], "Failed to initialize LocalCache: config didn't contain a valid 'size' field."),
        (["--cache-config", "local"], "No cache specified. --cache-config option format is <cache name>,<setting>=<value>. Got local"),
        (["--cache-config", "local,size"], "--cache-config option format is '<cache name>,<setting>=<value>'. Got local,size"),
        (
            ["--cache-config", "local,size=4096", "--cache-config", "redis,host=x"],
            "found multiple cache configurations, but only a single cache is currently supported",
        ),
        (
            ["--cache-config", "local,size=4096", "--response-cache-byte-size", "4096"],
            "Incompatible flags --response-cache-byte-size and --cache-config both provided.",
        ),
        (["--cache-config", "redis,host=localhost"], "Failed to initialize RedisCache, didn't specify address."),
        # Any other name is a cache library, looked up where tritonserver looks.
        (
            ["--cache-config", "nosuch,a=b"],
            "unable to find 'libtritoncache_nosuch.so' for cache. Searched: /opt/tritonserver/caches",
        ),
    ],
)
def test_bad_cache_flags_stop_start_up(make_repo, start_server, args, message):
    srv = start_server(make_repo([], {"add_sub": CACHED}), *args, wait=False)
    assert srv.wait_exit(10) != 0
    assert message in srv.log(), srv.log()


def test_deprecated_byte_size_flag_enables_local_cache(make_repo, start_server):
    srv = start_server(make_repo([], {"add_sub": CACHED}), "--response-cache-byte-size", "65536")
    client = srv.http_client()
    infer(client)
    infer(client)
    assert cache_stats(client)["hit"] == 1
    assert "deprecated" in srv.log()


def test_decoupled_model_with_cache_fails_to_load(make_repo, start_server, error_of):
    config = CACHED + "model_transaction_policy { decoupled: true }\n"
    srv = start_server(
        make_repo([], {"add_sub": config}), "--cache-config", "local,size=4096", "--exit-on-error=false"
    )
    index = srv.http_client().get_model_repository_index()
    assert index[0]["state"] == "UNAVAILABLE"
    assert "Response Cache does not currently support model add_sub with 'decoupled' transaction policy" in index[0]["reason"]


# --- redis ----------------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    """A redis-server process on a fixed port, so it can be stopped and restarted;
    with `password`, clients must authenticate; with `tls` (a dict of redis-server's
    `--tls-*` file options), it speaks TLS only."""

    def __init__(self, password=None, tls=None):
        binary = shutil.which("redis-server")
        assert binary, "redis-server is needed (apt-get install redis-server; scripts/test.sh does it)"
        self.binary = binary
        self.port = free_port()
        self.password = password
        self.tls = tls
        self.proc = None
        self.start()

    def start(self):
        auth = ["--requirepass", self.password] if self.password else []
        listen = ["--port", str(self.port)]
        if self.tls:
            listen = ["--port", "0", "--tls-port", str(self.port)]
            for option, value in self.tls.items():
                listen += [f"--{option}", value]
        self.proc = subprocess.Popen(
            [self.binary, *listen, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", *auth],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        def up():
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    if self.tls:
                        return self.proc.poll() is None  # accepting; the handshake is the test's
                    s.sendall(b"PING\r\n")
                    # With a password, Redis answers PING with NOAUTH: still up.
                    return s.recv(64).startswith((b"+PONG", b"-NOAUTH"))
            except OSError:
                return False

        wait_for(up, what="redis-server")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)

    def flags(self):
        return ["--cache-config", "redis,host=127.0.0.1", "--cache-config", f"redis,port={self.port}"]


@pytest.fixture
def redis():
    server = Redis()
    yield server
    server.stop()


@pytest.fixture
def redis_with_password():
    server = Redis(password="s3cret pw")  # a space: the URL must encode it
    yield server
    server.stop()


def wait_until_cached(client):
    """Until the background connection is up, requests miss without storing."""
    wait_for(lambda: (infer(client), cache_stats(client)["miss"])[1] >= 1, what="a stored entry")


def test_redis_entries_are_shared_between_servers(redis, make_repo, start_server):
    repo = make_repo([], {"add_sub": CACHED})
    first = start_server(repo, *redis.flags())
    second = start_server(repo, *redis.flags())
    wait_until_cached(first.http_client())
    result = infer(second.grpc_client())
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    assert cache_stats(second.http_client()) == {"hit": 1, "miss": 0, "success": 1, "exec": 0, "inferences": 0}


def test_redis_credentials_database_and_pool(redis_with_password, make_repo, start_server):
    redis = redis_with_password
    srv = start_server(
        make_repo([], {"add_sub": CACHED}), *redis.flags(),
        "--cache-config", f"redis,password={redis.password}",
        "--cache-config", "redis,db=3",
        "--cache-config", "redis,pool_size=2",
    )
    client = srv.http_client()
    wait_until_cached(client)
    infer(client)
    assert cache_stats(client)["hit"] >= 1
    # The entry lives in database 3, named by the key's hash.
    keys = subprocess.run(
        ["redis-cli", "-p", str(redis.port), "-a", redis.password, "--no-auth-warning", "-n", "3", "KEYS", "nereid:*"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    assert len(keys) == 1 and len(keys[0]) == len("nereid:") + 32, keys


def test_redis_wrong_password_serves_uncached(redis_with_password, make_repo, start_server):
    srv = start_server(
        make_repo([], {"add_sub": CACHED}), *redis_with_password.flags(),
        "--cache-config", "redis,password=wrong",
    )
    client = srv.http_client()
    for _ in range(3):
        np.testing.assert_array_equal(infer(client).as_numpy("OUTPUT0"), A + B)
    assert cache_stats(client)["exec"] == 3
    wait_for(lambda: "redis cache" in srv.log(), what="the connection error in the log")


def test_redis_down_and_back(redis, make_repo, start_server):
    srv = start_server(make_repo([], {"add_sub": CACHED}), *redis.flags())
    client = srv.http_client()
    wait_until_cached(client)
    redis.stop()
    # Requests keep working as if there were no cache, and promptly.
    started = time.monotonic()
    for i in range(5):
        np.testing.assert_array_equal(infer(client, a=A + i).as_numpy("OUTPUT0"), A + i + B)
    assert time.monotonic() - started < 5
    assert "redis cache" in srv.log()
    redis.start()  # an empty Redis: the entries are gone, the cache fills again
    wait_until_cached(client)
    before = cache_stats(client)["hit"]
    wait_for(lambda: (infer(client, a=A + 42), cache_stats(client)["hit"])[1] > before, what="a hit after restart")


def test_redis_unreachable_at_start_up(make_repo, start_server):
    port = free_port()
    srv = start_server(
        make_repo([], {"add_sub": CACHED}),
        "--cache-config", "redis,host=127.0.0.1", "--cache-config", f"redis,port={port}",
    )
    client = srv.grpc_client()
    for _ in range(3):
        np.testing.assert_array_equal(infer(client).as_numpy("OUTPUT0"), A + B)
    assert cache_stats(srv.http_client())["exec"] == 3
