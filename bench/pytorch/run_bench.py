"""Driver of scripts/bench_pytorch.sh: server CPU time per inference of one TorchScript model
served by Nereid through Triton's pytorch backend, beside the same model run by libtorch in
this machine's own process (bench/pytorch/inprocess_mlp.cc), at several batch sizes.

Per round, in this order: the in-process program (a fresh process: warm-up, then a fixed
number of timed forward calls per batch size, CPU from getrusage), then for each path and
batch size one load phase against the one long-lived server. A phase's server CPU is
utime + stime of the nereid process from /proc/PID/stat, before and after, divided by the
requests the server counted (its statistics extension); the same phase also reads each
thread's run time from /proc/PID/task/TID/schedstat (nanoseconds) to split that CPU
between the instance thread (the backend: input gathering, forward, output copy) and
the I/O threads (HTTP and gRPC frontends and the core's request path).

Paths: `http` and `grpc` are nereid-bench at concurrency 1 (HTTP with the binary tensor
extension, as tritonclient sends numpy arrays); `json` is a Python keep-alive loop that
posts the tensor as a JSON number list (the whole request and response in JSON).

Threads: the model config asks for THREADS intra-op and inter-op threads and the in-process
program calls at::set_num_threads / at::set_num_interop_threads with the same number. Both
processes also get OMP_NUM_THREADS=THREADS unless `--omp-env unset`: the backend applies
its parameters on the thread that loads the model, and OpenMP's thread count is a
per-thread setting, so without the variable the thread that runs forward keeps one OpenMP
thread per core (BENCHMARKS.md section 28 shows what that costs at batch 8).

Prints the per-phase lines as it goes, then a markdown table of medians over the rounds.
"""

import argparse
import http.client
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")

CONFIG = """backend: "pytorch"
max_batch_size: 8
input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 256 ] }} ]
output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters: {{ key: "INTRA_OP_THREAD_COUNT" value: {{ string_value: "{threads}" }} }}
parameters: {{ key: "INTER_OP_THREAD_COUNT" value: {{ string_value: "{threads}" }} }}
"""


def proc_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)


def thread_ns(pid):
    """{tid: (name, ns on CPU)} for every thread of pid."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
            ns = int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
        except OSError:
            continue
        out[tid] = (name, ns)
    return out


class Server:
    def __init__(self, args, repo, env):
        self.log_path = os.path.join(args.work, "server.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [args.nereid, "--model-repository", repo, "--backend-directory", args.backends,
             "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
             "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.pid = self.proc.pid
        self.http = self.grpc = None
        deadline = time.time() + 120
        while time.time() < deadline and not (self.http and self.grpc):
            if self.proc.poll() is not None:
                sys.exit(f"nereid exited ({self.proc.returncode}); log: {self.log_path}")
            text = open(self.log_path).read()
            m = re.search(r"Started HTTPService at ([\d.]+:\d+)", text)
            self.http = m and m.group(1)
            m = re.search(r"Started GRPCInferenceService at ([\d.]+:\d+)", text)
            self.grpc = m and m.group(1)
            time.sleep(0.1)
        if not (self.http and self.grpc):
            self.proc.kill()
            sys.exit(f"nereid did not start; log: {self.log_path}")
        host, port = self.http.split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)

    def request(self, method, path, body=None):
        self.conn.request(method, path, body, {"Content-Type": "application/json"} if body else {})
        answer = self.conn.getresponse()
        data = answer.read()
        if answer.status != 200:
            sys.exit(f"{method} {path}: {answer.status} {data[:300]!r}")
        return json.loads(data)

    def stats(self, model):
        s = self.request("GET", f"/v2/models/{model}/stats")["model_stats"][0]
        return int(s["inference_stats"]["success"]["count"]), int(s["inference_count"])

    def stop(self):
        self.conn.close()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def json_body(batch):
    rng = random.Random(batch)
    data = [round(rng.uniform(-1, 1), 6) for _ in range(batch * 256)]
    return json.dumps({"inputs": [{"name": "INPUT__0", "shape": [batch, 256], "datatype": "FP32",
                                   "data": data}]}).encode()


def json_load(server, model, batch, count):
    """count sequential keep-alive JSON requests; returns the client's requests per second."""
    host, port = server.http.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    body = json_body(batch)
    path = f"/v2/models/{model}/infer"
    headers = {"Content-Type": "application/json"}
    start = time.perf_counter()
    for _ in range(count):
        conn.request("POST", path, body, headers)
        answer = conn.getresponse()
        answer.read()
        if answer.status != 200:
            sys.exit(f"json infer: {answer.status}")
    elapsed = time.perf_counter() - start
    conn.close()
    return count / elapsed


def bench_load(args, server, proto, batch, window_ms, warmup_s):
    """nereid-bench at concurrency 1; returns the client's requests per second."""
    out = os.path.join(args.work, "bench.json")
    url = server.http if proto == "http" else server.grpc
    subprocess.run([args.bench, "-m", args.model_name, "-u", url, "-i", proto, "-b", str(batch),
                    "--concurrency-range", "1", "-p", str(window_ms), "-r", "3",
                    "--warmup-secs", str(warmup_s), "--quiet", "--json", out],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    step = json.load(open(out))["steps"][0]
    return step["throughput"] / batch


def server_phase(args, server, proto, batch):
    model = args.model_name
    t0, n0, threads0 = proc_ticks(server.pid), server.stats(model), thread_ns(server.pid)
    if proto == "json":
        rps = json_load(server, model, batch, args.json_requests)
    else:
        rps = bench_load(args, server, proto, batch, args.window_ms, 0.5)
    t1, n1, threads1 = proc_ticks(server.pid), server.stats(model), thread_ns(server.pid)
    requests = n1[0] - n0[0]
    samples = n1[1] - n0[1]
    split = {}
    for tid, (name, ns) in threads1.items():
        group = "instance" if name.startswith(model) else "io" if name.startswith("nereid-io") else "other"
        split[group] = split.get(group, 0) + ns - threads0.get(tid, (name, 0))[1]
    return {
        "requests": requests, "samples": samples,
        "cpu_us": (t1 - t0) / TICK / requests * 1e6,
        "instance_us": split.get("instance", 0) / requests / 1e3,
        "io_us": split.get("io", 0) / requests / 1e3,
        "other_us": split.get("other", 0) / requests / 1e3,
        "threads": len(threads1), "rps": rps,
    }


def inprocess_round(args, env):
    cmd = [args.inprocess, args.model, str(args.threads), "1", str(args.warmup)]
    cmd += [f"{b}:{args.iterations[i]}" for i, b in enumerate(args.batches)]
    text = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    rows = {}
    for line in text.splitlines():
        m = re.match(r"inprocess batch=(\d+) round=\d+ iterations=(\d+) cpu_us=([\d.]+) wall_us=([\d.]+)", line)
        if m:
            rows[int(m.group(1))] = {"requests": int(m.group(2)), "cpu_us": float(m.group(3)),
                                     "rps": 1e6 / float(m.group(4))}
        m = re.match(r"threads=(\d+) checksum=([-\d.]+)", line)
        if m:
            threads, checksum = int(m.group(1)), float(m.group(2))
    for row in rows.values():
        row["threads"] = threads
    return rows, checksum


def spread(values):
    return f"{statistics.median(values):,.1f} ({min(values):,.1f}–{max(values):,.1f})"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nereid", required=True)
    p.add_argument("--bench", required=True, help="nereid-bench binary")
    p.add_argument("--inprocess", required=True, help="inprocess_mlp binary")
    p.add_argument("--model", required=True, help="the TorchScript file")
    p.add_argument("--backends", required=True, help="--backend-directory holding pytorch/")
    p.add_argument("--work", required=True)
    p.add_argument("--model-name", default="mlp")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--omp-env", choices=["set", "unset"], default="set",
                   help="set: OMP_NUM_THREADS=THREADS in both processes' environment")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batches", default="1,8")
    p.add_argument("--paths", default="http,grpc,json")
    p.add_argument("--window-ms", type=int, default=2000, help="nereid-bench window (3 per phase)")
    p.add_argument("--json-requests", type=int, default=2000)
    p.add_argument("--iterations", default="20000,10000", help="in-process timed calls per batch size")
    p.add_argument("--warmup", type=int, default=500, help="in-process untimed calls per batch size")
    args = p.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    args.iterations = [int(n) for n in args.iterations.split(",")]
    paths = args.paths.split(",")

    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    env.pop("MKL_NUM_THREADS", None)
    if args.omp_env == "set":
        env["OMP_NUM_THREADS"] = str(args.threads)

    repo = os.path.join(args.work, "repo")
    shutil.rmtree(repo, ignore_errors=True)
    os.makedirs(os.path.join(repo, args.model_name, "1"))
    with open(os.path.join(repo, args.model_name, "config.pbtxt"), "w") as f:
        f.write(CONFIG.format(threads=args.threads))
    shutil.copy(args.model, os.path.join(repo, args.model_name, "1", "model.pt"))

    print(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; threads {args.threads} "
          f"(config INTRA/INTER_OP_THREAD_COUNT and at::set_num_threads/set_num_interop_threads), "
          f"OMP_NUM_THREADS {'=' + env['OMP_NUM_THREADS'] if 'OMP_NUM_THREADS' in env else 'unset'}",
          flush=True)
    server = Server(args, repo, env)
    results = {}
    try:
        # The same answer from both: the sum of the outputs for an input of ones.
        _, checksum = inprocess_round(args, env)
        body = json.dumps({"inputs": [{"name": "INPUT__0", "shape": [1, 256], "datatype": "FP32",
                                       "data": [1.0] * 256}]}).encode()
        out = server.request("POST", f"/v2/models/{args.model_name}/infer", body)
        served = sum(out["outputs"][0]["data"])
        if abs(served - checksum) > 1e-4 * max(1.0, abs(checksum)):
            sys.exit(f"the server answers {served}, libtorch in-process {checksum}")
        print(f"# same model: output sum for ones {served:.6f} served, {checksum:.6f} in-process", flush=True)
        for proto in paths:  # warm the executor and the connections on every path and shape
            for batch in args.batches:
                if proto == "json":
                    json_load(server, args.model_name, batch, 200)
                else:
                    bench_load(args, server, proto, batch, 300, 0.5)
        for rnd in range(args.rounds):
            rows, _ = inprocess_round(args, env)
            for batch, row in rows.items():
                results.setdefault(("in-process", batch), []).append(row)
                print(f"round {rnd} in-process b={batch}: {row['cpu_us']:.1f} µs CPU per call "
                      f"({row['requests']} calls, {row['threads']} threads)", flush=True)
            for proto in paths:
                for batch in args.batches:
                    row = server_phase(args, server, proto, batch)
                    results.setdefault((proto, batch), []).append(row)
                    print(f"round {rnd} {proto} b={batch}: {row['cpu_us']:.1f} µs server CPU per request "
                          f"({row['requests']} requests; instance thread {row['instance_us']:.1f}, io "
                          f"{row['io_us']:.1f}, other {row['other_us']:.1f}; {row['threads']} threads; "
                          f"client {row['rps']:.0f} req/s)", flush=True)
    finally:
        server.stop()
    print(f"# load average at the end {os.getloadavg()[0]:.2f}")

    print()
    print("| path | batch | CPU µs per request, median (min–max) | CPU µs per sample | over in-process, µs per request | ÷ in-process | of which instance thread / I/O threads, µs | requests per round | client req/s (noisy) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for batch in args.batches:
        base = statistics.median(r["cpu_us"] for r in results[("in-process", batch)])
        for path in ["in-process"] + paths:
            rows = results[(path, batch)]
            cpu = [r["cpu_us"] for r in rows]
            med = statistics.median(cpu)
            n = int(statistics.median(r["requests"] for r in rows))
            rps = statistics.median(r["rps"] for r in rows)
            if path == "in-process":
                label = "libtorch in-process"
                extra, split = "—", "—"
                ratio = "1"
            else:
                label = {"http": "Nereid HTTP (binary tensors)", "grpc": "Nereid gRPC",
                         "json": "Nereid HTTP (JSON tensors)"}[path]
                extra = f"+{med - base:,.1f}"
                ratio = f"{med / base:.2f}×"
                split = (f"{statistics.median(r['instance_us'] for r in rows):,.1f} / "
                         f"{statistics.median(r['io_us'] for r in rows):,.1f}")
            print(f"| {label} | {batch} | {spread(cpu)} | {med / batch:,.1f} | {extra} | {ratio} | {split} | {n:,} | {rps:,.0f} |")


if __name__ == "__main__":
    main()
