"""A C++ backend in the style of Triton's `recommended` example, hosted by the binary:
crates/triton-abi/tests/backend/cpp_backend.cc, built here with `c++` against the ABI
(no Triton header or library), loaded from `--backend-directory`, driven by tritonclient.
It proves what a company's own C++ backend relies on: unmangled `extern "C"` entry
points, C++ state objects behind the state pointers, exceptions turned into errors inside
the backend (never crossing into the server), a batch gathered into one buffer and
scattered back, and per-request and per-batch statistics.
"""

import os
import shutil
import subprocess
import threading
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import REPO_ROOT

SOURCE = os.path.join(REPO_ROOT, "crates", "triton-abi", "tests", "backend", "cpp_backend.cc")
F32 = np.float32
# The fixture's --pinned-memory-pool-byte-size: 1 MiB.
POOL = 1 << 20


@pytest.fixture(scope="module")
def cpp_server(tmp_path_factory):
    from conftest import Server, base_args

    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler (c++) to build the C++ test backend")
    backends = tmp_path_factory.mktemp("backends")
    library = backends / "nereid_cpp" / "libtriton_nereid_cpp.so"
    library.parent.mkdir()
    subprocess.run([compiler, "-std=c++17", "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror",
                    "-fvisibility=hidden", "-o", str(library), SOURCE], check=True)
    exported = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True,
                              text=True, check=True).stdout
    # Only the five entry points leave the library, under their C names.
    assert sorted(line.split()[-1] for line in exported.splitlines() if " T " in line) == [
        "TRITONBACKEND_ModelFinalize", "TRITONBACKEND_ModelInitialize",
        "TRITONBACKEND_ModelInstanceExecute", "TRITONBACKEND_ModelInstanceFinalize",
        "TRITONBACKEND_ModelInstanceInitialize"]
    root = tmp_path_factory.mktemp("cpp_models")
    staged = 'instance_group [ { count: 2 kind: KIND_CPU } ]\nparameters { key: "pinned_staging_bytes" value { string_value: "%d" } }'
    for name, extra in [("scaled", "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 200000 }"),
                        ("plain", "max_batch_size: 0"),
                        # Two instances of one page each fit the pool; the big one does not
                        # and gets ordinary memory.
                        ("staged", "max_batch_size: 0\n" + staged % 100),
                        ("staged_big", "max_batch_size: 0\n" + staged % (2 * POOL))]:
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(f'''backend: "nereid_cpp"
{extra}
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
parameters {{ key: "scale" value {{ string_value: "2.5" }} }}
parameters {{ key: "unlucky" value {{ string_value: "13" }} }}
''')
    srv = Server(str(root), base_args(str(root), ["--backend-directory", str(backends),
                                                  "--pinned-memory-pool-byte-size", str(POOL),
                                                  "--model-control-mode=explicit",
                                                  "--load-model=*"]))
    try:
        yield srv.wait_started()
    finally:
        srv.kill()


def infer(protocol, url, model, values):
    client = (httpclient.InferenceServerClient(url, network_timeout=30) if protocol is httpclient
              else grpcclient.InferenceServerClient(url))
    data = np.asarray(values, F32)
    tensor = protocol.InferInput("IN", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    try:
        return client.infer(model, [tensor]).as_numpy("OUT")
    finally:
        client.close()


def test_a_batch_is_gathered_computed_once_and_scattered(cpp_server):
    http = cpp_server.http_client()
    before = http.get_inference_statistics("scaled")["model_stats"][0]
    results, errors = {}, []

    def one(i):
        protocol, url = ((httpclient, cpp_server.http_url) if i % 2
                         else (grpcclient, cpp_server.grpc_url))
        try:
            results[i] = infer(protocol, url, "scaled", [[i, i + 0.5, -i, 100 + i]])
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, out in results.items():
        np.testing.assert_array_equal(out, np.asarray([[i, i + 0.5, -i, 100 + i]], F32) * 2.5)
    stats = http.get_inference_statistics("scaled")["model_stats"][0]
    ran = int(stats["inference_count"]) - int(before.get("inference_count", 0))
    executions = int(stats["execution_count"]) - int(before.get("execution_count", 0))
    assert ran == 6 and executions < 6, stats
    assert any(int(b["batch_size"]) > 1 for b in stats["batch_stats"]), stats["batch_stats"]
    assert int(stats["inference_stats"]["success"]["count"]) >= 6


def test_an_exception_fails_its_request_alone(cpp_server):
    outcomes = {}

    def one(name, values):
        try:
            outcomes[name] = infer(httpclient, cpp_server.http_url, "scaled", values)
        except InferenceServerException as e:
            outcomes[name] = e

    threads = [threading.Thread(target=one, args=("good", [[1, 2, 3, 4]])),
               threading.Thread(target=one, args=("unlucky", [[1, 13, 3, 4]]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(outcomes["good"], [[2.5, 5, 7.5, 10]])
    error = outcomes["unlucky"]
    assert isinstance(error, InferenceServerException), error
    assert "scaled: the computation threw: value 13 is unlucky" in str(error)
    assert cpp_server.http_client().is_server_ready()


def test_a_model_without_batching(cpp_server):
    out = infer(grpcclient, cpp_server.grpc_url, "plain", [1, 2, 3, 4])
    np.testing.assert_array_equal(out, [2.5, 5, 7.5, 10])


def pinned_gauges(server):
    text = requests.get(f"http://{server.metrics_url}/metrics", timeout=10).text
    values = {}
    for line in text.splitlines():
        if line.startswith("nv_pinned_memory_pool_"):
            name, value = line.split()
            values[name] = int(value)
    return values["nv_pinned_memory_pool_total_bytes"], values["nv_pinned_memory_pool_used_bytes"]


def test_pinned_buffers_come_from_the_pool_the_flag_sizes(cpp_server):
    # Two instances of "staged" hold a page each; "staged_big" asked for more than the
    # pool and got ordinary memory, so it counts nothing and still serves.
    assert pinned_gauges(cpp_server) == (POOL, 2 * 4096)
    np.testing.assert_array_equal(infer(httpclient, cpp_server.http_url, "staged_big", [1, 2, 3, 4]),
                                  [2.5, 5, 7.5, 10])
    http = cpp_server.http_client()
    http.unload_model("staged")
    deadline = time.monotonic() + 10
    while pinned_gauges(cpp_server) != (POOL, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pinned_gauges(cpp_server) == (POOL, 0)
    http.load_model("staged")
    assert pinned_gauges(cpp_server) == (POOL, 2 * 4096)
