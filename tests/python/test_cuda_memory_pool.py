"""GPU buffers a hosted backend asks the memory manager for
(TRITONBACKEND_MemoryManagerAllocate with TRITONSERVER_MEMORY_GPU) come from that GPU's
CUDA memory pool, `--cuda-memory-pool-byte-size` (Triton's 64 MiB per GPU by default, 0:
none), reserved when first asked for and fixed-size from then on, as Triton's. The CUDA
driver test double (fake_cuda/fake_cuda.c) stands in for the GPUs: its device memory is
host memory, so the C test backend (mode "gpu_scratch") fills every piece it holds and
checks no two overlap. Without a driver, GPU buffers are refused as Triton's CPU build
refuses them.
"""

from conftest import Server, base_args, wait_for
from test_hosted_backend import build, model

# TRITONSERVER_Error_Code values.
INTERNAL, UNAVAILABLE, UNSUPPORTED = 1, 4, 5
MIB = 1 << 20
IO = """
input [ { name: "IN" data_type: TYPE_INT64 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT64 dims: [ -1 ] } ]"""


def start(tmp_path, args=(), env=None, kind="KIND_GPU"):
    """A server with the scratch model on GPU 0 and `scratch1` on GPU 1 (KIND_GPU), or
    one `scratch` instance of `kind`."""
    backends = tmp_path / "backends"
    build(backends, "nereid_test")
    root = tmp_path / "models"
    model(root, "scratch", "gpu_scratch", io=IO, extra=f"instance_group [ {{ kind: {kind} gpus: [ 0 ] }} ]"
          if kind == "KIND_GPU" else f"instance_group [ {{ kind: {kind} }} ]")
    if kind == "KIND_GPU" and (env or {}).get("FAKE_CUDA_DEVICES") == "2":
        model(root, "scratch1", "gpu_scratch", io=IO, extra="instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]")
    server = Server(str(root), base_args(str(root), ["--backend-directory", str(backends), *args]), env=env)
    server.wait_started(timeout=60)
    return server


def scratch(server, name, sizes):
    """What the backend said of each GPU buffer of `sizes` bytes it held at once."""
    body = {"inputs": [{"name": "IN", "datatype": "INT64", "shape": [len(sizes)], "data": sizes}]}
    answer = server.request("POST", f"/v2/models/{name}/infer", body)
    assert answer.status == 200, answer.json()
    return answer.json()["outputs"][0]["data"]


def logged(server, text):
    """Waits for `text` in the server's log: the reader thread may take a moment after the
    answer that followed the line."""
    wait_for(lambda: text in server.log(), timeout=5, what=f"{text!r} in the log")


def test_gpu_buffers_come_from_each_gpus_pool_until_it_is_full(tmp_path, fake_cuda):
    server = start(tmp_path, ["--cuda-memory-pool-byte-size=0:4096", "--cuda-memory-pool-byte-size=1:0"],
                   env={"NEREID_CUDA_LIBRARY": fake_cuda, "FAKE_CUDA_DEVICES": "2"})
    try:
        assert "CUDA memory pool is created" not in server.log(), "reserved before anyone asked"
        assert scratch(server, "scratch", [1024, 2048, 1000]) == [0, 0, 0]
        # Given back after each request: the whole pool again, but never more.
        assert scratch(server, "scratch", [4096]) == [0]
        assert scratch(server, "scratch", [4000, 1]) == [0, INTERNAL]
        logged(server, "gpu_scratch 1: Failed to allocate CUDA memory with byte size 1 on GPU 0")
        log = server.log()
        assert log.count("CUDA memory pool is created on device 0 with size 4096") == 1, log
        # GPU 1's pool is sized 0: no pool there, and the server goes on serving.
        assert scratch(server, "scratch1", [16]) == [UNAVAILABLE]
        logged(server, "no preallocated CUDA memory on GPU 1")
        assert scratch(server, "scratch", [16, 16]) == [0, 0]
    finally:
        server.kill()


def test_by_default_each_gpu_has_tritons_64_mib(tmp_path, fake_cuda):
    server = start(tmp_path, env={"NEREID_CUDA_LIBRARY": fake_cuda})
    try:
        assert scratch(server, "scratch", [64 * MIB]) == [0]
        assert scratch(server, "scratch", [64 * MIB + 1]) == [INTERNAL]
        logged(server, "CUDA memory pool is created on device 0 with size 67108864")
    finally:
        server.kill()


def test_a_pool_the_driver_cannot_reserve_fails_each_buffer_with_why(tmp_path, fake_cuda):
    server = start(tmp_path, env={"NEREID_CUDA_LIBRARY": fake_cuda, "FAKE_CUDA_MEMORY": "1000"})
    try:
        assert scratch(server, "scratch", [16]) == [INTERNAL]
        logged(server, "Failed to create the CUDA memory pool of 67108864 bytes on GPU 0: out of memory")
    finally:
        server.kill()


def test_without_cuda_gpu_buffers_are_refused_as_tritons_cpu_build(tmp_path):
    server = start(tmp_path, env={"NEREID_CUDA_LIBRARY": str(tmp_path / "no-libcuda.so")}, kind="KIND_CPU")
    try:
        assert scratch(server, "scratch", [16]) == [UNSUPPORTED]
        logged(server, "gpu_scratch 16: GPU memory allocation not supported: CUDA is not available")
    finally:
        server.kill()
