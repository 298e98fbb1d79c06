#!/usr/bin/env python3
"""Server CPU per streamed token and per request: the OpenAI route (`/v1/completions`
with `stream: true`) beside KServe's `generate_stream` on the same model, in one run.

The model is a deterministic stand-in in the tensor convention of Triton's vLLM backend
(`bench_llm`, written into a temporary repository): `max_tokens` tokens, one streamed
response each, no delay, token counts and finish reason reported. Both routes ask it
for the same tensors (`exclude_input_in_output`, `return_num_input_tokens`,
`return_num_output_tokens`, `return_finish_reason`, `sampling_parameters` with
`max_tokens`), so the model's work is the same and only the frontends differ.

Server CPU is utime + stime of the nereid process alone from /proc/<pid>/stat, read
before and after each phase: the core, the frontends and the python backend's host side
(libtriton_python.so runs inside nereid) are in it; the python backend's stub, a process
of its own that runs model.py, is not (its CPU is printed for reference). Each phase
sends the same load to one route: `--requests` requests (or as many as fit in
`--seconds`) by `c` client threads with keep-alive connections, for c in
`--concurrency`; phases alternate between the routes `--rounds` times and are summed.
With two token counts (`--tokens 32,256`) the per-token cost is also read as the slope
between them, which takes the per-request cost out. Loopback only.

`--profile` then runs one more phase per route (the largest token count, one client)
under `perf record` (sampling at 4 kHz, after the measured phases, so perf's own cost is
in none of them) and prints the samples of the nereid process per token: by DSO, and
nereid's own code by what it is (the OpenAI frontend, KServe's, serde_json, the core,
tokio...). Needs `perf` (Debian's linux-perf).

    .venv/bin/python scripts/bench_openai.py [--nereid target/release/nereid] [--profile]
"""

import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO_ROOT, "tests", "python"))

from triton_wheel import python_backend_directory, stub_environment  # noqa: E402

MODEL = "bench_llm"
PROMPT = "count for the benchmark"
STARTED = re.compile(r"Started (HTTPService|OpenAIService) at ([0-9.]+):(\d+)")

CONFIG = f"""name: "{MODEL}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [
  {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true }},
  {{ name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true }},
  {{ name: "exclude_input_in_output" data_type: TYPE_BOOL dims: [ 1 ] optional: true }},
  {{ name: "return_num_input_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true }},
  {{ name: "return_num_output_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true }},
  {{ name: "return_finish_reason" data_type: TYPE_BOOL dims: [ 1 ] optional: true }}
]
output [
  {{ name: "text_output" data_type: TYPE_STRING dims: [ -1 ] }},
  {{ name: "num_input_tokens" data_type: TYPE_UINT32 dims: [ 1 ] }},
  {{ name: "num_output_tokens" data_type: TYPE_UINT32 dims: [ 1 ] }},
  {{ name: "finish_reason" data_type: TYPE_STRING dims: [ 1 ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""

# `max_tokens` tokens " t<i>", one response each, as fast as the stub sends them; the
# tensors that do not change are made once per request.
MODEL_PY = '''
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def flag(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return tensor is not None and bool(tensor.as_numpy().flatten()[0])


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().flatten()[0]
            raw = pb_utils.get_input_tensor_by_name(request, "sampling_parameters").as_numpy().flatten()[0]
            count = int(json.loads(raw)["max_tokens"])
            one = pb_utils.Tensor("num_output_tokens", np.array([1], dtype=np.uint32))
            first = [pb_utils.Tensor("num_input_tokens", np.array([len(prompt.split())], dtype=np.uint32))]
            if not flag(request, "return_num_input_tokens"):
                first = []
            for i in range(count):
                text = pb_utils.Tensor("text_output", np.array([(" t%d" % i).encode()], dtype=np.object_))
                outputs = [text, one] + (first if i == 0 else [])
                sender.send(pb_utils.InferenceResponse(output_tensors=outputs))
            last = [pb_utils.Tensor("text_output", np.array([b""], dtype=np.object_)),
                    pb_utils.Tensor("num_output_tokens", np.array([0], dtype=np.uint32)),
                    pb_utils.Tensor("finish_reason", np.array([b"length"], dtype=np.object_))]
            sender.send(pb_utils.InferenceResponse(output_tensors=last),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''


def cpu_seconds(pid):
    """utime + stime of process `pid` (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid):
    """The processes whose parent is `pid` (the python backend's stubs)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except OSError:
                pass
    return out


def openai_request(tokens):
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": tokens, "stream": True}
    return "/v1/completions", body


def kserve_request(tokens):
    body = {
        "text_input": PROMPT,
        "stream": True,
        "exclude_input_in_output": True,
        "return_num_input_tokens": True,
        "return_num_output_tokens": True,
        "return_finish_reason": True,
        "sampling_parameters": json.dumps({"max_tokens": tokens}),
    }
    return f"/v2/models/{MODEL}/generate_stream", body


def openai_tokens(event):
    choices = event.get("choices") or []
    return sum(1 for c in choices if c.get("text"))


def kserve_tokens(event):
    return 1 if event.get("text_output") else 0


ROUTES = {
    "openai": ("openai", openai_request, openai_tokens),
    "generate_stream": ("http", kserve_request, kserve_tokens),
}


def stream_once(conn, path, body, count):
    """One streamed request; the tokens its events carried."""
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"{path}: {resp.status} {resp.read()[:300]!r}")
    tokens = 0
    while True:
        line = resp.readline()
        if not line:
            break
        if line.startswith(b"data: ") and line[6:].strip() != b"[DONE]":
            event = json.loads(line[6:])
            if "error" in event:
                raise RuntimeError(f"{path}: {event}")
            tokens += count(event)
    return tokens


def phase(addresses, route, tokens, concurrency, requests, seconds, pid):
    """Runs one route's load; returns its measurements."""
    port, make, count = ROUTES[route]
    host, p = addresses[port]
    path, body = make(tokens)
    lock = threading.Lock()
    state = {"left": requests, "requests": 0, "tokens": 0, "errors": []}
    deadline = time.monotonic() + seconds

    def worker():
        conn = http.client.HTTPConnection(host, p, timeout=60)
        try:
            while time.monotonic() < deadline:
                with lock:
                    if state["left"] <= 0:
                        return
                    state["left"] -= 1
                got = stream_once(conn, path, body, count)
                with lock:
                    state["requests"] += 1
                    state["tokens"] += got
        except Exception as e:  # reported with the phase
            with lock:
                state["errors"].append(repr(e))
        finally:
            conn.close()

    stubs = children(pid)
    stub_before = sum(cpu_seconds(s) for s in stubs)
    before, start = cpu_seconds(pid), time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, cpu = time.monotonic() - start, cpu_seconds(pid) - before
    stub = sum(cpu_seconds(s) for s in stubs) - stub_before
    if state["errors"]:
        raise RuntimeError(f"{route}: {state['errors'][:3]}")
    return {"requests": state["requests"], "tokens": state["tokens"], "wall": wall, "cpu": cpu, "stub": stub}


def start_server(binary, repo, backends, env):
    args = [binary, "--model-repository", repo, "--http-port", "0", "--http-address", "127.0.0.1",
            "--allow-grpc=false", "--allow-metrics=false", "--openai-port", "0",
            "--openai-address", "127.0.0.1", "--backend-directory", backends]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, **env})
    addresses, lines = {}, []
    deadline = time.monotonic() + 120
    while len(addresses) < 2 and time.monotonic() < deadline:
        line = proc.stdout.readline().decode(errors="replace")
        if not line:
            break
        lines.append(line)
        m = STARTED.search(line)
        if m:
            addresses["http" if m.group(1) == "HTTPService" else "openai"] = (m.group(2), int(m.group(3)))
    if len(addresses) < 2:
        proc.kill()
        sys.exit("nereid did not start:\n" + "".join(lines[-40:]))
    # Keep draining its log so it never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return proc, addresses


# nereid's own symbols by what they are, first match wins (`--profile`).
SYMBOL_GROUPS = [
    ("nereid_openai", ("nereid_openai",)),
    ("nereid_http (KServe)", ("nereid_http",)),
    ("serde_json Value maps (indexmap, hashing)", ("indexmap", "hashbrown", "hash::sip", "BuildHasher")),
    ("serde_json", ("serde_json", "serde_core")),
    ("futures / async_stream", ("futures_util", "futures_unordered", "async_stream")),
    ("C ABI (python backend's host side)", ("tritonserver",)),
    ("nereid_core", ("nereid_core",)),
    ("tokio", ("tokio",)),
    ("hyper / axum", ("hyper", "axum", "http_body")),
    ("alloc / fmt / str", ("alloc::", "core::fmt", "core::str", "String")),
]
PERF_HZ = 4000


def profile(addresses, route, tokens, pid, out_dir):
    """One phase of `route` under perf; samples per token by DSO and by symbol group."""
    data = os.path.join(out_dir, f"{route}.data")
    perf = subprocess.Popen(["perf", "record", "-q", "-F", str(PERF_HZ), "-p", str(pid), "-o", data],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    r = phase(addresses, route, tokens, 1, 300, 20, pid)
    perf.send_signal(2)
    perf.wait(60)
    per_token = 1e6 / PERF_HZ / r["tokens"]

    def report(*sort):
        out = subprocess.run(["perf", "report", "-i", data, "--no-children", "--stdio", "--show-nr-samples",
                              *sort], capture_output=True, text=True).stdout
        for line in out.splitlines():
            m = re.match(r"\s*[\d.]+%\s+(\d+)\s+(.*)", line)
            if m:
                yield int(m.group(1)), m.group(2).strip()

    dsos = {name: n * per_token for n, name in report("--sort", "dso")}
    groups = {}
    binary = os.path.basename(os.path.realpath(f"/proc/{pid}/exe"))
    for n, sym in report("--dsos", binary, "--sort", "sym"):
        group = next((g for g, keys in SYMBOL_GROUPS if any(k in sym for k in keys)), "other")
        groups[group] = groups.get(group, 0) + n * per_token
    return dsos, groups


def profile_table(profiles):
    routes = list(profiles)
    rows = [f"| sampled CPU µs/token | {' | '.join(routes)} |", "|---|" + "---|" * len(routes)]
    for index in (0, 1):
        keys = []
        for route in routes:
            for key, value in sorted(profiles[route][index].items(), key=lambda kv: -kv[1]):
                if key not in keys and value >= 0.01:
                    keys.append(key)
        title = "the nereid process, by DSO" if index == 0 else "nereid's own code, by symbol"
        rows.append(f"| **{title}** |{' |' * len(routes)}")
        for key in keys:
            rows.append(f"| {key} | " + " | ".join(f"{profiles[r][index].get(key, 0):.2f}" for r in routes) + " |")
        rows.append(f"| total | " + " | ".join(f"{sum(profiles[r][index].values()):.2f}" for r in routes) + " |")
    return "\n".join(rows)


def table(results, tokens_list):
    rows = ["| tokens/request | concurrency | route | requests | tokens | wall s | tokens/s | server CPU s "
            "| CPU µs/token | CPU µs/request | stub CPU s (excluded) |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (tokens, c, route), r in sorted(results.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] != "openai")):
        rows.append(f"| {tokens} | {c} | {route} | {r['requests']} | {r['tokens']} | {r['wall']:.2f} | "
                    f"{r['tokens'] / r['wall']:.0f} | {r['cpu']:.2f} | {1e6 * r['cpu'] / r['tokens']:.2f} | "
                    f"{1e6 * r['cpu'] / r['requests']:.0f} | {r['stub']:.2f} |")
    rows.append("")
    rows.append("| tokens/request | concurrency | OpenAI ÷ generate_stream (CPU/token) | OpenAI − generate_stream "
                "(CPU µs/token) | marginal µs/token OpenAI | marginal µs/token generate_stream |")
    rows.append("|---|---|---|---|---|---|")
    concurrencies = sorted({c for _, c, _ in results})
    for c in concurrencies:
        marginal = {}
        if len(tokens_list) >= 2:
            lo, hi = min(tokens_list), max(tokens_list)
            for route in ROUTES:
                a, b = results[(lo, c, route)], results[(hi, c, route)]
                per_lo, per_hi = a["cpu"] / a["requests"], b["cpu"] / b["requests"]
                tok_lo, tok_hi = a["tokens"] / a["requests"], b["tokens"] / b["requests"]
                marginal[route] = 1e6 * (per_hi - per_lo) / (tok_hi - tok_lo)
        for tokens in tokens_list:
            o, k = results[(tokens, c, "openai")], results[(tokens, c, "generate_stream")]
            po, pk = o["cpu"] / o["tokens"], k["cpu"] / k["tokens"]
            m = (f"{marginal['openai']:.2f} | {marginal['generate_stream']:.2f}"
                 if marginal and tokens == max(tokens_list) else "— | —")
            rows.append(f"| {tokens} | {c} | {po / pk:.2f}× | {1e6 * (po - pk):+.2f} | {m} |")
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nereid", default=os.environ.get("NEREID_BIN", os.path.join(REPO_ROOT, "target", "release", "nereid")))
    parser.add_argument("--tokens", default="256", help="tokens per request; two values also give the slope")
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--requests", type=int, default=100, help="requests per phase (at most)")
    parser.add_argument("--seconds", type=float, default=20.0, help="time limit per phase")
    parser.add_argument("--rounds", type=int, default=2, help="phases per route, alternating")
    parser.add_argument("--profile", action="store_true", help="one more phase per route under perf record")
    args = parser.parse_args()
    tokens_list = [int(t) for t in args.tokens.split(",")]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    backends = python_backend_directory()
    env = stub_environment()
    repo = tempfile.mkdtemp(prefix="bench-openai-")
    proc = None
    try:
        os.makedirs(os.path.join(repo, MODEL, "1"))
        with open(os.path.join(repo, MODEL, "config.pbtxt"), "w") as f:
            f.write(CONFIG)
        with open(os.path.join(repo, MODEL, "1", "model.py"), "w") as f:
            f.write(MODEL_PY)
        proc, addresses = start_server(args.nereid, repo, backends, env)
        for route in ROUTES:  # warm up both paths (connections, allocator, stub)
            phase(addresses, route, 16, 2, 20, 30, proc.pid)
        idle_before = cpu_seconds(proc.pid)
        time.sleep(2)
        idle = (cpu_seconds(proc.pid) - idle_before) / 2
        results = {}
        for tokens in tokens_list:
            for c in concurrencies:
                for i in range(args.rounds):
                    order = list(ROUTES) if i % 2 == 0 else list(reversed(ROUTES))
                    for route in order:
                        r = phase(addresses, route, tokens, c, args.requests, args.seconds, proc.pid)
                        total = results.setdefault((tokens, c, route), dict.fromkeys(r, 0))
                        for key, value in r.items():
                            total[key] += value
        print(f"nereid: {args.nereid}; idle server CPU {1e3 * idle:.1f} ms/s (not subtracted); "
              f"{os.cpu_count()} CPUs; {args.rounds} rounds of at most {args.requests} requests / "
              f"{args.seconds:.0f} s per route and concurrency")
        print(table(results, tokens_list))
        if args.profile:
            profiles = {route: profile(addresses, route, max(tokens_list), proc.pid, repo) for route in ROUTES}
            print()
            print(profile_table(profiles))
    finally:
        if proc is not None:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(repo, ignore_errors=True)


if __name__ == "__main__":
    main()
