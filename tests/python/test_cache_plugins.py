"""TRITONCACHE cache plugins: `--cache-directory DIR --cache-config <name>,k=v` loads
`DIR/<name>/libtritoncache_<name>.so` and serves the response cache through it, with
tritonclient over HTTP and gRPC.

Two plugins:
- Nereid's test plugin (crates/triton-abi/tests/plugins/memory_cache.c, compiled here
  with `cc`): hits and misses, a plugin that fails its calls (served uncached), and
  load-time errors in tritonserver's words.
- Triton's own local cache plugin from the nvidia-pytriton 0.7.0 wheel (Triton 2.51),
  relinked with patchelf to need `libtritonserver.so` instead of Triton's hashed
  library: every TRITONSERVER_*/TRITONCACHE_* call it makes resolves to the nereid
  executable. The wheel (about 55 MB) is downloaded once into a cache folder under the
  system temp directory; the tests skip with the reason when it cannot be had.

Beyond Triton, over every store: the plugin's key is a hash, but the entry holds the
full key and a lookup compares it, so a hash collision is a miss.
"""

import os
import shutil
import subprocess

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import ADD_SUB_IO, REPO_ROOT, add_sub_config, add_sub_inputs, nereid_bin, wait_for
from triton_wheel import extract

F32 = np.float32
A = np.array([[1.0, 2.0, 3.0, 4.0]], F32)
B = np.array([[0.5, -1.0, 10.0, 2.25]], F32)
CACHED = add_sub_config(name="add_sub", extra="response_cache { enable: true }\n")
PLUGIN_SOURCE = os.path.join(REPO_ROOT, "crates", "triton-abi", "tests", "plugins", "memory_cache.c")
LOCAL_PLUGIN = "pytriton/tritonserver/caches/local/libtritoncache_local.so"


def module_of(client):
    return httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient


def infer(client, a=A, b=B, model="add_sub"):
    return client.infer(model, add_sub_inputs(module_of(client), a, b))


def cache_stats(client, model="add_sub"):
    """The model's cache counters, read over the client's own protocol."""
    if module_of(client) is grpcclient:
        s = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    else:
        s = client.get_inference_statistics(model)["model_stats"][0]
    i = s["inference_stats"]
    # gRPC's JSON renders 64-bit counts as strings (and leaves out zeros).
    count = lambda section: int(i.get(section, {}).get("count", 0))  # noqa: E731
    return {"hit": count("cache_hit"), "miss": count("cache_miss"),
            "success": count("success"), "exec": int(s.get("execution_count", 0))}


def client_for(srv, proto):
    return srv.http_client() if proto == "http" else srv.grpc_client()


@pytest.fixture
def caches(tmp_path):
    """A cache directory with Nereid's test plugin as `memory`."""
    directory = tmp_path / "caches"
    target = directory / "memory" / "libtritoncache_memory.so"
    target.parent.mkdir(parents=True)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(target), PLUGIN_SOURCE], check=True)
    return directory


@pytest.fixture
def cached_repo(make_repo):
    return make_repo([], {"add_sub": CACHED})


# --- Nereid's test plugin -----------------------------------------------------------


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_plugin_serves_identical_requests_from_the_cache(caches, cached_repo, start_server, proto):
    srv = start_server(cached_repo, "--cache-directory", str(caches), "--cache-config", "memory,size=1000")
    log = srv.log()
    assert "Creating TritonCache with name: 'memory', libpath: '" in log
    # Escaped in the log line, as Triton escapes messages.
    assert "cache_config: '{\\\"size\\\":\\\"1000\\\"}'" in log
    # The plugin's TRITONSERVER_LogMessage call, in Nereid's log.
    assert "memory cache initialized" in log
    client = client_for(srv, proto)
    first = infer(client)
    second = infer(client)
    np.testing.assert_array_equal(second.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(second.as_numpy("OUTPUT1"), first.as_numpy("OUTPUT1"))
    assert cache_stats(client) == {"hit": 1, "miss": 1, "success": 2, "exec": 1}
    # Other bytes are another entry.
    infer(client, a=A + 1)
    assert cache_stats(client) == {"hit": 1, "miss": 2, "success": 3, "exec": 2}


def test_failing_plugin_serves_requests_uncached(caches, cached_repo, start_server):
    srv = start_server(cached_repo, "--cache-directory", str(caches), "--cache-config", "memory,fail=insert")
    client = srv.http_client()
    for _ in range(3):
        np.testing.assert_array_equal(infer(client).as_numpy("OUTPUT0"), A + B)
    stats = cache_stats(client)
    assert stats["hit"] == 0 and stats["exec"] == 3 and stats["success"] == 3


def startup_error(start_server, repo, *args):
    srv = start_server(repo, *args, wait=False)
    code = srv.wait_exit(20)
    assert code not in (0, None), srv.log()
    return srv.log()


def test_load_errors_name_the_library(caches, cached_repo, start_server):
    log = startup_error(start_server, cached_repo, "--cache-directory", str(caches), "--cache-config", "absent,size=1")
    assert f"creating server: Invalid argument - unable to find 'libtritoncache_absent.so' for cache. Searched: {caches}" in log
    log = startup_error(start_server, cached_repo, "--cache-directory", str(caches), "--cache-config", "memory,fail=init")
    assert "memory cache: refusing to start" in log


def test_builtin_local_cache_stays_built_in(caches, cached_repo, start_server):
    # No `local` library in the directory: the built-in local cache.
    srv = start_server(cached_repo, "--cache-directory", str(caches), "--cache-config", "local,size=1048576")
    assert "libtritoncache" not in srv.log()
    client = srv.http_client()
    infer(client)
    infer(client)
    assert cache_stats(client)["hit"] == 1


# --- Triton's own local cache plugin --------------------------------------------------


def triton_local_plugin():
    """Path of Triton's libtritoncache_local.so from the wheel, or skips with the reason."""
    return os.path.join(extract(LOCAL_PLUGIN), LOCAL_PLUGIN)


@pytest.fixture
def triton_caches(tmp_path):
    """A cache directory with Triton's local plugin, relinked to need
    `libtritonserver.so` (found beside the nereid binary)."""
    if shutil.which("patchelf") is None:
        pytest.skip("patchelf is not installed (scripts/test.sh installs it)")
    library_dir = os.path.dirname(nereid_bin())
    if not os.path.exists(os.path.join(library_dir, "libtritonserver.so")):
        pytest.skip(f"no libtritonserver.so beside {nereid_bin()}")
    source = triton_local_plugin()
    directory = tmp_path / "caches"
    target = directory / "local" / "libtritoncache_local.so"
    target.parent.mkdir(parents=True)
    shutil.copyfile(source, target)
    needed = subprocess.run(["patchelf", "--print-needed", str(target)], check=True,
                            capture_output=True, text=True).stdout.split()
    hashed = [n for n in needed if n.startswith("libtritonserver")]
    assert hashed, needed
    subprocess.run(["patchelf", "--replace-needed", hashed[0], "libtritonserver.so",
                    "--set-rpath", library_dir, str(target)], check=True)
    return directory


def metric(srv, name):
    for line in srv.metrics().splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_tritons_local_plugin_serves_the_cache(triton_caches, cached_repo, start_server, proto):
    srv = start_server(cached_repo, "--cache-directory", str(triton_caches),
                       "--cache-config", "local,size=1048576")
    assert "caches/local/libtritoncache_local.so" in srv.log()
    client = client_for(srv, proto)
    first = infer(client)
    second = infer(client)
    np.testing.assert_array_equal(first.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(second.as_numpy("OUTPUT1"), A - B)
    infer(client, a=A + 1)
    assert cache_stats(client) == {"hit": 1, "miss": 2, "success": 3, "exec": 2}
    # The plugin's own gauges (TRITONSERVER_Metric* calls into the nereid executable),
    # refreshed by the plugin once a second.
    wait_for(lambda: metric(srv, "nv_cache_num_hits") == 1, timeout=5, what="the plugin's nv_cache_num_hits")
    assert metric(srv, "nv_cache_num_entries") == 2
    assert metric(srv, "nv_cache_num_misses") == 2


def test_tritons_local_plugin_evicts_when_full(triton_caches, cached_repo, start_server):
    srv = start_server(cached_repo, "--cache-directory", str(triton_caches),
                       "--cache-config", "local,size=4096")
    client = srv.http_client()
    for i in range(40):
        infer(client, a=A + i)
    infer(client)  # the first entry was evicted long ago
    assert cache_stats(client)["hit"] == 0
    infer(client)  # ...and stored again
    assert cache_stats(client)["hit"] == 1
    wait_for(lambda: (metric(srv, "nv_cache_num_evictions") or 0) > 0, timeout=5, what="evictions")


def test_tritons_local_plugin_caches_an_ensemble(triton_caches, make_repo, start_server):
    ensemble = (
        f'name: "ens_cache"\nplatform: "ensemble"\nmax_batch_size: 8\n{ADD_SUB_IO}'
        + "response_cache { enable: true }\n"
        + 'ensemble_scheduling { step [ { model_name: "add_sub" model_version: -1 '
        'input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" } '
        'output_map { key: "OUTPUT0" value: "OUTPUT0" } output_map { key: "OUTPUT1" value: "OUTPUT1" } } ] }\n'
    )
    repo = make_repo([], {"add_sub": add_sub_config(name="add_sub"), "ens_cache": ensemble})
    srv = start_server(repo, "--cache-directory", str(triton_caches), "--cache-config", "local,size=1048576")
    http, grpc = srv.http_client(), srv.grpc_client()
    infer(http, model="ens_cache")
    result = infer(grpc, model="ens_cache")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    assert cache_stats(http, "ens_cache")["hit"] == 1
    assert cache_stats(http, "add_sub")["exec"] == 1
