"""The same TorchScript model (tests/gpu/make_gpu_models.py's DEPTH rounds of
tanh(x @ W), DIM x DIM float32 weights) on a KIND_GPU and a KIND_CPU instance of
Triton's pytorch backend under nereid, side by side over gRPC: per batch size, the
median latency of requests sent one after another and the throughput of CONCURRENCY
clients. Run by scripts/gpu_check.sh on the device machine; prints one JSON object and
exits 1 unless the GPU instance is faster at the largest batch.

Environment: NEREID_GRPC_URL (default localhost:8001).
"""

import json
import os
import statistics
import sys
import threading
import time

import numpy as np
import tritonclient.grpc as grpcclient

from make_gpu_models import DEPTH, DIM, MAX_BATCH

URL = os.environ.get("NEREID_GRPC_URL", "localhost:8001")
BATCHES = [1, 8, MAX_BATCH]
SECONDS = float(os.environ.get("GPU_VS_CPU_SECONDS", "3"))
CONCURRENCY = 4


def request(batch):
    tensor = grpcclient.InferInput("INPUT__0", [batch, DIM], "FP32")
    tensor.set_data_from_numpy(np.random.default_rng(batch).standard_normal((batch, DIM), dtype=np.float32))
    return [tensor]


def latency_ms(client, model, batch):
    """Median of sequential requests for SECONDS (at least 5), after 3 warm-ups."""
    inputs = request(batch)
    for _ in range(3):
        client.infer(model, inputs)
    took = []
    end = time.perf_counter() + SECONDS
    while time.perf_counter() < end or len(took) < 5:
        start = time.perf_counter()
        client.infer(model, inputs)
        took.append((time.perf_counter() - start) * 1000)
    return statistics.median(took)


def throughput(model, batch):
    """Inferences (batch rows) per second from CONCURRENCY clients for SECONDS."""
    done = [0] * CONCURRENCY
    end = time.perf_counter() + SECONDS

    def run(slot):
        client = grpcclient.InferenceServerClient(URL)
        inputs = request(batch)
        while time.perf_counter() < end:
            client.infer(model, inputs)
            done[slot] += batch

    threads = [threading.Thread(target=run, args=(slot,)) for slot in range(CONCURRENCY)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / (time.perf_counter() - started)


def main():
    client = grpcclient.InferenceServerClient(URL)
    report = {"model": f"{DEPTH} x tanh(x @ W), W {DIM}x{DIM} fp32", "concurrency": CONCURRENCY,
              "seconds_per_point": SECONDS, "points": []}
    for batch in BATCHES:
        point = {"batch": batch}
        for kind in ("gpu", "cpu"):
            model = f"torch_matmul_{kind}"
            point[f"{kind}_latency_ms"] = round(latency_ms(client, model, batch), 3)
            point[f"{kind}_infer_per_s"] = round(throughput(model, batch), 1)
        point["latency_speedup"] = round(point["cpu_latency_ms"] / point["gpu_latency_ms"], 2)
        point["throughput_speedup"] = round(point["gpu_infer_per_s"] / point["cpu_infer_per_s"], 2)
        report["points"].append(point)
    print(json.dumps(report, indent=1))
    last = report["points"][-1]
    return 0 if last["latency_speedup"] > 1 and last["throughput_speedup"] > 1 else 1


if __name__ == "__main__":
    sys.exit(main())
