"""Round-trip latency of one 4 MiB tensor through the identity model
`custom_identity_int32` (INT32 [1, 1048576] in and out), sent three ways: in the HTTP
or gRPC body, in system shared memory, and in CUDA shared memory. Run by
scripts/gpu_check.sh on the device machine; prints one JSON object (milliseconds:
median, p90, mean over ROUNDS after WARMUP) and checks every answer.

Environment: NEREID_HTTP_URL, NEREID_GRPC_URL (default localhost:8000 / 8001), ROUNDS
(default 100).
"""

import json
import os
import statistics
import sys
import time
import uuid

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.cuda_shared_memory as cudashm
import tritonclient.utils.shared_memory as sysshm

MODEL = "custom_identity_int32"
COUNT = 1 << 20  # INT32 elements: 4 MiB
BYTES = COUNT * 4
ROUNDS = int(os.environ.get("ROUNDS", "100"))
WARMUP = 10


def timed(call, check):
    for _ in range(WARMUP):
        check(call())
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        result = call()
        samples.append((time.perf_counter() - start) * 1000)
        check(result)
    samples.sort()
    return {
        "median_ms": round(statistics.median(samples), 3),
        "p90_ms": round(samples[int(len(samples) * 0.9) - 1], 3),
        "mean_ms": round(statistics.fmean(samples), 3),
    }


def measure(protocol, client, data):
    tag = uuid.uuid4().hex[:6]
    results = {}

    def tensors():
        inp = protocol.InferInput("INPUT0", [1, COUNT], "INT32")
        out = protocol.InferRequestedOutput("OUTPUT0")
        return inp, out

    # 1. The tensor in the request and response bodies (binary).
    inp, out = tensors()
    if protocol is httpclient:
        inp.set_data_from_numpy(data, binary_data=True)
        out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
    else:
        inp.set_data_from_numpy(data)

    def body_ok(r):
        assert np.array_equal(r.as_numpy("OUTPUT0"), data)

    results["body"] = timed(lambda: client.infer(MODEL, [inp], outputs=[out]), body_ok)

    # 2. System shared memory for input and output.
    in_key, out_key = f"/lat_in_{tag}", f"/lat_out_{tag}"
    sys_in = sysshm.create_shared_memory_region(f"sys_in_{tag}", in_key, BYTES)
    sys_out = sysshm.create_shared_memory_region(f"sys_out_{tag}", out_key, BYTES)
    sysshm.set_shared_memory_region(sys_in, [data])
    client.register_system_shared_memory(f"sys_in_{tag}", in_key, BYTES)
    client.register_system_shared_memory(f"sys_out_{tag}", out_key, BYTES)
    inp, out = tensors()
    inp.set_shared_memory(f"sys_in_{tag}", BYTES)
    out.set_shared_memory(f"sys_out_{tag}", BYTES)

    def sys_ok(_):
        assert np.array_equal(sysshm.get_contents_as_numpy(sys_out, np.int32, [1, COUNT]), data)

    results["system_shm"] = timed(lambda: client.infer(MODEL, [inp], outputs=[out]), sys_ok)
    client.unregister_system_shared_memory()
    sysshm.destroy_shared_memory_region(sys_in)
    sysshm.destroy_shared_memory_region(sys_out)

    # 3. CUDA shared memory for input and output.
    cuda_in = cudashm.create_shared_memory_region(f"cuda_in_{tag}", BYTES, 0)
    cuda_out = cudashm.create_shared_memory_region(f"cuda_out_{tag}", BYTES, 0)
    cudashm.set_shared_memory_region(cuda_in, [data])
    client.register_cuda_shared_memory(f"cuda_in_{tag}", cudashm.get_raw_handle(cuda_in), 0, BYTES)
    client.register_cuda_shared_memory(
        f"cuda_out_{tag}", cudashm.get_raw_handle(cuda_out), 0, BYTES
    )
    inp, out = tensors()
    inp.set_shared_memory(f"cuda_in_{tag}", BYTES)
    out.set_shared_memory(f"cuda_out_{tag}", BYTES)

    def cuda_ok(_):
        got = cudashm.get_contents_as_numpy(cuda_out, np.int32, [1, COUNT])
        assert np.array_equal(got, data)

    results["cuda_shm"] = timed(lambda: client.infer(MODEL, [inp], outputs=[out]), cuda_ok)
    client.unregister_cuda_shared_memory()
    cudashm.destroy_shared_memory_region(cuda_in)
    cudashm.destroy_shared_memory_region(cuda_out)
    return results


def main():
    data = np.random.default_rng(7).integers(-(2**31), 2**31 - 1, (1, COUNT), dtype=np.int32)
    http = httpclient.InferenceServerClient(
        os.environ.get("NEREID_HTTP_URL", "localhost:8000"), network_timeout=120
    )
    grpc = grpcclient.InferenceServerClient(os.environ.get("NEREID_GRPC_URL", "localhost:8001"))
    report = {
        "tensor_bytes": BYTES,
        "rounds": ROUNDS,
        "http": measure(httpclient, http, data),
        "grpc": measure(grpcclient, grpc, data),
    }
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
