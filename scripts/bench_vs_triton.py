"""Nereid beside Triton 2.51 under the same load: server CPU time per request (user and
system apart), throughput and p50/p99 latency, with Nereid/Triton ratios; an nginx floor for
the HTTP cache hit; optionally heap allocations per request. Run through
scripts/bench_vs_triton.sh, which builds what this needs.

Both servers run for the whole benchmark; every round runs each cell on Nereid and then on
Triton (the order alternates between rounds), so slow drifts of this shared machine touch
both. A cell's server CPU is the utime and stime its process and children (python backend
stubs) spent during the load, read from /proc, divided by the requests the server counted
in its statistics: the figure that stays meaningful while the load generator shares the
cores. Each figure in the table is the median over the rounds, written user+sys=total µs
(each part its own median, so they may not add up to the last digit); ratios are on totals.

Cells (c = concurrency, batch 1):
  cache_http_c1/c4, cache_grpc_c1/c4  every request a response-cache hit (add_sub_cache)
  model_http_c4, model_grpc_c4        add_sub runs: Nereid's ONNX model, Triton's python one
  python_http_c4, python_grpc_c4      add_sub in Triton's python backend on both servers
                                      (only where the wheel's python backend is unpacked)
  opt-in: model_{http,grpc}_c{1,16}, cache_{http,grpc}_c16 (latency checks against --base)

Tools: perf_analyzer and nereid-bench on every cell, and on the cache_http cells also wrk
(-t1, keep-alive POST of add_sub's inputs as JSON, for ceil(3 windows) whole seconds). Under
wrk the requests are wrk's own count on every server, any non-2xx answer or socket error
fails the run, and a third server takes part: nginx (one worker, access_log off) answering a
fixed 200 with the exact body Nereid answers, the practical floor of an HTTP/1.1 server on
this kernel (parse, route, write). Its table gives nginx, Nereid and Triton in user+sys=total
µs per request with Nereid/nginx and Triton/nginx ratios: the figures
../shared/triton/floor.sh prints as user_us, sys_us, total_us (which it runs on its own
servers, with dynamic batching on Nereid's add_sub_cache). A fourth, `hyper`, is the floor
of Nereid's own HTTP stack: the hyper_floor example (tokio and hyper configured as nereid
runs them) answering the same fixed 200, so the table shows what the libraries cost beside
nginx and what Nereid's request path adds beside them. `handoff` is hyper_floor with
--handoff: each request first crosses to a worker thread and back (a crossbeam channel out,
a tokio oneshot back, as a served model's request goes to its instance thread), the floor of
a model request; with `--tools wrk --cells model_http_c4` the floors stand beside add_sub
running (their body is add_sub_cache's answer, six bytes longer than add_sub's). A fifth, `tonic`, is the same for
gRPC: the grpc_floor example (tokio, hyper's HTTP/2 and tonic as nereid runs them) answering
ModelInfer with the serialized answer Nereid gave, on the cache_grpc cells under nereid-bench
(ModelStatistics counts its calls); its table gives tonic, Nereid and Triton side by side.

With --trace-levels, each cell runs once per trace level on the same two servers, the
level set over the trace extension before the load (`off`, `timestamps`, `tensors` =
TIMESTAMPS+TENSORS, each on every request, and `timestamps@1000` = every 1000th); both
servers then start in the --trace-mode given: `triton` writes JSON trace files every
100 traces, `opentelemetry` exports to a local OTLP receiver that only counts bytes.

Then mlp_large (compute-bound) served by Nereid at concurrency 1 in requests of a fixed
batch size, against ONNX Runtime in-process on one thread, in CPU per inference; and
add_sub run in-process the same way (the compute floor of the add_sub cells).

With --allocs, after the CPU rounds (so the shim slows no CPU-measured server): a separate
Nereid, and Triton where it is in --servers, each under scripts/alloc_count.c as LD_PRELOAD
(compiled into OUT at start), which counts the glibc malloc family into a shared file; for
cache_http_c1, cache_grpc_c1, model_http_c1 and model_grpc_c1 under nereid-bench, and
cache_http_c1 under wrk (the floor's JSON request), allocations and bytes requested per
request, the server's statistics counting the requests.
Both binaries use glibc's malloc (Nereid has no Rust global allocator), so the shim sees
Rust's, C++'s and C's allocations alike; Triton's python stubs inherit the shim and count
into the same file. `--rounds 0 --ort-batches ''` runs the allocation part alone.

The tables go to OUT/summary.md, every run's figures to OUT/rows.json (allocations to
OUT/allocs.json). --nereid, --bench and --ort-inprocess take copied binaries, so a
benchmark can run while target/ is being rebuilt.
"""

import argparse
import csv
import json
import math
import os
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRITON = os.path.join(ROOT, "..", "shared", "triton")
NEREID = os.path.join(ROOT, "target", "release", "nereid")
BENCH = os.path.join(ROOT, "target", "release", "nereid-bench")
ORT_INPROCESS = os.path.join(ROOT, "target", "release", "examples", "ort_inprocess")
HYPER_FLOOR = os.path.join(ROOT, "target", "release", "examples", "hyper_floor")
GRPC_FLOOR = os.path.join(ROOT, "target", "release", "examples", "grpc_floor")
WHEEL = os.environ.get("TRITON_CACHE") or os.path.join(tempfile.gettempdir(), "nereid-triton-wheel")
PY_BACKENDS = os.path.join(WHEEL, "unpacked", "pytriton", "tritonserver", "backends")
STUB_VENV = os.path.join(WHEEL, "stub-venv", "bin")
CLK_TCK = os.sysconf("SC_CLK_TCK")
NGINX_PORT = 28300
HYPER_PORT = 28400
HANDOFF_PORT = 28450
TONIC_PORT = 28500
# Servers that answer a fixed body: they stand in only where that body is the answer.
FLOORS = ("nginx", "hyper", "handoff", "tonic")
# What wrk posts: add_sub's inputs (the same names and shapes in Nereid's and Triton's
# repositories) as KServe v2 JSON, floor.sh's body.
WRK_BODY = ('{"inputs":[{"name":"INPUT0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]},'
            '{"name":"INPUT1","shape":[1,4],"datatype":"FP32","data":[1,1,1,1]}]}')
# --allocs: the (cell, tool) runs on the servers under the shim, each for one short window;
# wrk's JSON cache hit is the request of the floor table (and of the earlier uprobe count).
ALLOC_RUNS = (("cache_http_c1", "nereid-bench"), ("cache_grpc_c1", "nereid-bench"), ("model_http_c1", "nereid-bench"),
              ("model_grpc_c1", "nereid-bench"), ("cache_http_c1", "wrk"))
ALLOC_WINDOW_MS = 1000
# alloc_count.c's counters, in file order.
ALLOC_COUNTERS = ("malloc", "calloc", "realloc", "aligned", "free", "bytes")

# cell -> (model on Nereid, model on Triton, protocol, concurrency)
CELLS = {
    "cache_http_c1": ("add_sub_cache", "add_sub_cache", "http", 1),
    "cache_http_c4": ("add_sub_cache", "add_sub_cache", "http", 4),
    "cache_grpc_c1": ("add_sub_cache", "add_sub_cache", "grpc", 1),
    "cache_grpc_c4": ("add_sub_cache", "add_sub_cache", "grpc", 4),
    "model_http_c4": ("add_sub", "add_sub", "http", 4),
    "model_grpc_c4": ("add_sub", "add_sub", "grpc", 4),
    "python_http_c4": ("add_sub_py", "add_sub", "http", 4),
    "python_grpc_c4": ("add_sub_py", "add_sub", "grpc", 4),
}
DEFAULT_CELLS = list(CELLS)
# Opt-in (--cells): the latency sweep that checks a change against --base.
for _protocol in ("http", "grpc"):
    for _c in (1, 16):
        CELLS[f"model_{_protocol}_c{_c}"] = ("add_sub", "add_sub", _protocol, _c)
    CELLS[f"cache_{_protocol}_c16"] = ("add_sub_cache", "add_sub_cache", _protocol, 16)


class Server:
    """One running server: its process id, ports and a way to stop it."""

    def __init__(self, name, pid, http, grpc, stop):
        self.name, self.pid, self.http, self.grpc, self._stop = name, pid, http, grpc, stop

    def cpu_ticks(self):
        """(utime, stime) of the server and its live children, in clock ticks: apart,
        because the kernel's share (sockets, wake-ups) and ours move for different reasons."""
        user = system = 0
        children = subprocess.run(["pgrep", "-P", str(self.pid)], capture_output=True, text=True).stdout
        for pid in [str(self.pid)] + children.split():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            user += int(fields[11])
            system += int(fields[12])
        return user, system

    def footprint(self):
        """(resident MiB, threads) of the server and its live children."""
        rss_kib = threads = 0
        children = subprocess.run(["pgrep", "-P", str(self.pid)], capture_output=True, text=True).stdout
        for pid in [str(self.pid)] + children.split():
            try:
                with open(f"/proc/{pid}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
            except OSError:
                continue
            rss_kib += int(fields["VmRSS"].split()[0])
            threads += int(fields["Threads"])
        return rss_kib / 1024, threads

    def counts(self, model):
        """(successful requests, inferences) the server counted for `model`: over HTTP, or
        over gRPC for a server without an HTTP port (the gRPC floor)."""
        if self.http is None:
            return grpc_counts(self.grpc, model)
        url = f"http://127.0.0.1:{self.http}/v2/models/{model}/stats"
        with urllib.request.urlopen(url, timeout=10) as answer:
            stats = json.load(answer)["model_stats"]
        success = sum(int(s["inference_stats"]["success"]["count"]) for s in stats)
        return success, sum(int(s["inference_count"]) for s in stats)

    def stop(self):
        self._stop()


def grpc_counts(port, model):
    """(successful requests, inferences) from gRPC ModelStatistics on `port`."""
    import tritonclient.grpc as grpcclient
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        stats = client.get_inference_statistics(model).model_stats
    finally:
        client.close()
    return sum(s.inference_stats.success.count for s in stats), sum(s.inference_count for s in stats)


def wait_ready(port, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"server on port {port} did not become ready in {seconds} s")


def nereid_repository(with_python):
    """add_sub (ONNX, from examples/models), add_sub_cache (the same with the response
    cache) and, when Triton's python backend is at hand, Triton's python add_sub."""
    repo = tempfile.mkdtemp(prefix="nereid-vs-triton-")
    shutil.copytree(os.path.join(ROOT, "examples", "models", "add_sub"), os.path.join(repo, "add_sub"))
    shutil.copytree(os.path.join(repo, "add_sub"), os.path.join(repo, "add_sub_cache"))
    config = os.path.join(repo, "add_sub_cache", "config.pbtxt")
    with open(config) as f:
        text = f.read().replace('name: "add_sub"', 'name: "add_sub_cache"')
    with open(config, "w") as f:
        f.write(text + "response_cache { enable: true }\n")
    if with_python:
        shutil.copytree(os.path.join(TRITON, "models", "add_sub"), os.path.join(repo, "add_sub_py"))
        config = os.path.join(repo, "add_sub_py", "config.pbtxt")
        with open(config) as f:
            text = f.read().replace('name: "add_sub"', 'name: "add_sub_py"')
        with open(config, "w") as f:
            f.write(text)
    return repo


# trace level name -> (trace_level list, trace_rate), set over the trace extension.
TRACE_LEVELS = {
    "off": (["OFF"], "1000"),
    "timestamps": (["TIMESTAMPS"], "1"),
    "tensors": (["TIMESTAMPS", "TENSORS"], "1"),
    "timestamps@1000": (["TIMESTAMPS"], "1000"),
}


def trace_flags(mode, out, name, collector_port):
    """Start-up flags for tracing in `mode` (the level stays OFF until set)."""
    if mode == "triton":
        return ["--trace-config", f"triton,file={os.path.join(out, name + '-trace.json')}",
                "--trace-config", "triton,log-frequency=100"]
    return ["--trace-config", "mode=opentelemetry",
            "--trace-config", f"opentelemetry,url=127.0.0.1:{collector_port}/v1/traces"]


def set_trace_level(server, level):
    levels, rate = TRACE_LEVELS[level]
    body = json.dumps({"trace_level": levels, "trace_rate": rate, "trace_count": "-1"}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{server.http}/v2/trace/setting", data=body,
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()


def start_collector():
    """An OTLP/HTTP receiver that takes every export and keeps only the byte count."""
    received = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            received[0] += len(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, received


def start_nereid(port, with_python, log, binary=None, name="nereid", extra=(), env_extra=None):
    repo = nereid_repository(with_python)
    args = [binary or NEREID, "--model-repository", repo, "--http-port", str(port), "--grpc-port", str(port + 1),
            "--metrics-port", str(port + 2), "--cache-config", "local,size=1048576", *extra]
    env = dict(os.environ)
    if with_python:
        args += ["--backend-directory", PY_BACKENDS]
        env["PATH"] = STUB_VENV + os.pathsep + env.get("PATH", "")
    env.update(env_extra or {})
    process = subprocess.Popen(args, stdout=log, stderr=log, env=env)

    def stop():
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(repo, ignore_errors=True)

    ready_or_stop(port, stop)
    return Server(name, process.pid, port, port + 1, stop)


def ready_or_stop(port, stop):
    """wait_ready, stopping the server when it never gets there: a start-up that fails
    must not leave a process behind, as the caller never learns of it."""
    try:
        wait_ready(port)
    except BaseException:
        stop()
        raise


def start_triton(port, extra=(), env_extra=None):
    """Triton through triton-anchor.sh, which starts tritonserver directly (no chroot or
    namespace) with the environment it is given: an LD_PRELOAD in `env_extra` reaches the
    server and its python stubs (and the anchor's own short-lived helpers, which end before
    any load)."""
    anchor = os.path.join(TRITON, "triton-anchor.sh")
    env = dict(os.environ, **(env_extra or {}))
    pid = subprocess.run([anchor, "start", "--model-repository", os.path.join(TRITON, "models"),
                          "--http-port", str(port), "--grpc-port", str(port + 1),
                          "--metrics-port", str(port + 2), *(["--", *extra] if extra else [])],
                         check=True, capture_output=True, text=True, env=env).stdout.split()[-1]

    def stop():
        subprocess.run([anchor, "stop", pid], capture_output=True)

    ready_or_stop(port, stop)
    return Server("triton", int(pid), port, port + 1, stop)


def infer_answer(port, model="add_sub_cache"):
    """The exact JSON body the server on HTTP `port` answers WRK_BODY with: what nginx
    returns, so the floor writes as many bytes as the servers it is compared with."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/{model}/infer",
                                     data=WRK_BODY.encode(), headers={"Content-Type": "application/json"},
                                     method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.read().decode()


def ensure_nginx_and_wrk():
    """nginx and wrk from Debian (as floor.sh installs them) when either is missing."""
    if shutil.which("nginx") and shutil.which("wrk"):
        return
    subprocess.run(["apt-get", "install", "-y", "-q", "nginx-light", "wrk"], check=True, capture_output=True)


def answering(process, port, answer, stop, failure):
    """Waits until the fixed-answer server `process` answers `answer` on `port`; stops it
    and ends the run with `failure` if it exits or is still silent after 10 s."""
    deadline = time.time() + 10
    while True:
        try:
            if infer_answer(port) == answer:
                return
        except OSError:
            pass
        if time.time() > deadline or process.poll() is not None:
            stop()
            raise SystemExit(failure)
        time.sleep(0.1)


def start_nginx(port, out, answer, log):
    """nginx as floor.sh runs it: one worker, no access log, a fixed 200 with `answer` for
    any path. Its CPU is the master's and the worker's (a child), like a server's stubs."""
    if "'" in answer or "$" in answer:
        raise SystemExit(f"the answer cannot be quoted into nginx.conf: {answer}")
    prefix = os.path.join(out, "nginx")
    os.makedirs(prefix, exist_ok=True)
    conf = os.path.join(prefix, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_buffer_size 16k;
  server {{
    listen 127.0.0.1:{port};
    location / {{ default_type application/json; return 200 '{answer}'; }}
  }}
}}
""")
    process = subprocess.Popen(["nginx", "-c", conf, "-p", prefix], stdout=log, stderr=log)

    def stop():
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    answering(process, port, answer, stop, f"nginx on port {port} did not answer; see {prefix}/error.log")
    return Server("nginx", process.pid, port, None, stop)


def start_hyper_floor(port, out, answer, log, handoff=False):
    """The hyper_floor example answering `answer` to every request (after a round trip to a
    worker thread with `handoff`, as server `handoff`): Nereid's HTTP stack
    (tokio, hyper's HTTP/1.1, one I/O worker per two cores) with nothing behind it."""
    body = os.path.join(out, "hyper_floor_answer.json")
    with open(body, "w") as f:
        f.write(answer)
    process = subprocess.Popen([HYPER_FLOOR, str(port), body, *(["--handoff"] if handoff else [])],
                               stdout=log, stderr=log)

    def stop():
        process.terminate()
        process.wait()

    answering(process, port, answer, stop, f"hyper_floor on port {port} did not answer")
    return Server("handoff" if handoff else "hyper", process.pid, port, None, stop)


def load_command(tool, server, model, protocol, concurrency, window_ms, csv_path):
    port = server.http if protocol == "http" else server.grpc
    # perf_analyzer runs in a chroot that sees only the working directory: the CSV path is
    # given relative to it (measure runs the load in the CSV's folder).
    common = ["-m", model, "-u", f"127.0.0.1:{port}", "-i", protocol,
              "--concurrency-range", str(concurrency), "-p", str(window_ms), "-f", os.path.basename(csv_path)]
    if tool == "perf_analyzer":
        return [os.path.join(TRITON, "perf-analyzer.sh"), *common, "--stability-percentage", "20",
                "--max-trials", "6"]
    return [BENCH, *common, "-s", "20", "-r", "6", "--warmup-secs", "0.5", "--quiet"]


def cpu_figures(ticks0, ticks1, requests):
    """Server CPU over a load, in total and per request, user and system apart."""
    user_s, sys_s = ((after - before) / CLK_TCK for before, after in zip(ticks0, ticks1))

    def per_request(seconds):
        return seconds / requests * 1e6 if requests else float("nan")

    return {"cpu_s": user_s + sys_s, "cpu_us_per_request": per_request(user_s + sys_s),
            "user_us_per_request": per_request(user_s), "sys_us_per_request": per_request(sys_s)}


def grpc_answers(port, out, model="add_sub_cache"):
    """The serialized ModelMetadata, ModelConfig and ModelInfer (of WRK_BODY's inputs) answers
    of the server on gRPC `port`, as files in OUT: what the gRPC floor answers."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        inputs = []
        for name, values in (("INPUT0", [1, 2, 3, 4]), ("INPUT1", [1, 1, 1, 1])):
            tensor = grpcclient.InferInput(name, [1, 4], "FP32")
            tensor.set_data_from_numpy(np.array([values], dtype=np.float32))
            inputs.append(tensor)
        messages = {"metadata": client.get_model_metadata(model), "config": client.get_model_config(model),
                    "infer": client.infer(model, inputs).get_response()}
    finally:
        client.close()
    paths = []
    for what, message in messages.items():
        path = os.path.join(out, f"grpc_floor_{what}.bin")
        with open(path, "wb") as f:
            f.write(message.SerializeToString())
        paths.append(path)
    return paths


def start_grpc_floor(port, out, source, log):
    """The grpc_floor example answering with `source`'s serialized answers: Nereid's gRPC
    stack (tokio, hyper's HTTP/2, tonic, one I/O worker per two cores) with nothing behind it."""
    process = subprocess.Popen([GRPC_FLOOR, str(port), *grpc_answers(source.grpc, out)], stdout=log, stderr=log)

    def stop():
        process.terminate()
        process.wait()

    deadline = time.time() + 10
    while True:
        try:
            grpc_counts(port, "add_sub_cache")
            break
        except Exception:  # tritonclient raises its own error types while the port is closed
            if time.time() > deadline or process.poll() is not None:
                stop()
                raise SystemExit(f"grpc_floor on port {port} did not answer")
            time.sleep(0.1)
    return Server("tonic", process.pid, None, port, stop)


def measure(tool, server, model, protocol, concurrency, window_ms, csv_path):
    """One load run against one server: its CPU per request and the load's own figures."""
    if tool == "wrk":
        return measure_wrk(server, model, concurrency, window_ms, os.path.dirname(csv_path))
    success0, inferences0 = server.counts(model)
    ticks0 = server.cpu_ticks()
    try:
        run = subprocess.run(load_command(tool, server, model, protocol, concurrency, window_ms, csv_path),
                             capture_output=True, text=True, timeout=120, cwd=os.path.dirname(csv_path))
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"{tool} against {server.name} {model}: no end after {e.timeout} s") from e
    ticks1 = server.cpu_ticks()
    success1, inferences1 = server.counts(model)
    rss_mib, threads = server.footprint()
    if run.returncode != 0:
        tail = (run.stdout + run.stderr)[-400:]
        raise RuntimeError(f"{tool} against {server.name} {model} failed: {tail}")
    requests = success1 - success0
    with open(csv_path) as f:
        row = next(csv.DictReader(f))
    return {
        "requests": requests,
        "inferences": inferences1 - inferences0,
        **cpu_figures(ticks0, ticks1, requests),
        "infer_per_s": float(row["Inferences/Second"]),
        "p50_us": float(row["p50 latency"]),
        "p99_us": float(row["p99 latency"]),
        "rss_mib": rss_mib,
        "threads": threads,
    }


def measure_steadily(tool, server, model, protocol, concurrency, window_ms, csv_path):
    """`measure`, tried again with windows twice as long when the load finds none steady
    (perf_analyzer and nereid-bench give up after six); the last error if both fail."""
    error = None
    for window in (window_ms, 2 * window_ms):
        try:
            return measure(tool, server, model, protocol, concurrency, window, csv_path)
        except (RuntimeError, OSError) as e:
            error = e
    return error


def answers(server):
    """Whether `server` still says it is ready (the gRPC floor: still counts its calls)."""
    if server.http is None:
        try:
            grpc_counts(server.grpc, "add_sub_cache")
            return True
        except Exception:  # tritonclient's errors, whatever the failure
            return False
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.http}/v2/health/ready", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def wrk_seconds(window_ms):
    """wrk takes whole seconds: three windows (perf_analyzer's least), rounded up."""
    return max(1, math.ceil(3 * window_ms / 1000))


def wrk_script(out):
    """The lua file that makes wrk POST WRK_BODY as JSON."""
    path = os.path.join(out, "post.lua")
    with open(path, "w") as f:
        f.write(f'wrk.method = "POST"\nwrk.body = \'{WRK_BODY}\'\n'
                'wrk.headers["Content-Type"] = "application/json"\n')
    return path


def wrk_duration_us(text):
    """'123.45us', '1.20ms' or '2.00s' (wrk's latency format) in µs."""
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()
    return float(number) * {"us": 1, "ms": 1e3, "s": 1e6, "m": 60e6}[unit]


def parse_wrk(text):
    """wrk --latency's report: requests, requests/s, p50/p99 µs, non-2xx answers, socket errors."""
    requests = re.search(r"^\s*(\d+) requests in", text, re.M)
    rate = re.search(r"^Requests/sec:\s*([\d.]+)", text, re.M)
    if not requests or not rate:
        raise RuntimeError(f"wrk's report has no request count: {text[-400:]}")
    latency = dict(re.findall(r"^\s*(50|99)%\s+(\S+)$", text, re.M))
    non2xx = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", text)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    return {
        "requests": int(requests.group(1)),
        "infer_per_s": float(rate.group(1)),
        "p50_us": wrk_duration_us(latency["50"]) if "50" in latency else float("nan"),
        "p99_us": wrk_duration_us(latency["99"]) if "99" in latency else float("nan"),
        "non2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": sum(map(int, errors.groups())) if errors else 0,
    }


def run_wrk(server, model, concurrency, window_ms, out):
    """wrk against one server's HTTP port: parse_wrk's report, after checking every answer was a 2xx."""
    url = f"http://127.0.0.1:{server.http}/v2/models/{model}/infer"
    command = ["wrk", "-t1", f"-c{concurrency}", f"-d{wrk_seconds(window_ms)}s", "--latency",
               "-s", wrk_script(out), url]
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=wrk_seconds(window_ms) + 60)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"wrk against {server.name} {model}: no end after {e.timeout} s") from e
    if run.returncode != 0:
        raise RuntimeError(f"wrk against {server.name} {model} failed: {(run.stdout + run.stderr)[-400:]}")
    report = parse_wrk(run.stdout)
    if report["non2xx"] or report["socket_errors"]:
        raise RuntimeError(f"wrk against {server.name} {model}: {report['non2xx']} non-2xx answers, "
                           f"{report['socket_errors']} socket errors")
    return report


def measure_wrk(server, model, concurrency, window_ms, out):
    """One wrk run (keep-alive POSTs, one thread) against one server's HTTP port. The
    requests are wrk's count, the one figure nginx also has (it keeps no statistics), so
    every server is divided by the same kind of count; a non-2xx answer or a socket error
    means the figure is not of what we meant to measure, and fails the run."""
    ticks0 = server.cpu_ticks()
    report = run_wrk(server, model, concurrency, window_ms, out)
    ticks1 = server.cpu_ticks()
    rss_mib, threads = server.footprint()
    return {
        "requests": report["requests"],
        "inferences": report["requests"],
        **cpu_figures(ticks0, ticks1, report["requests"]),
        "infer_per_s": report["infer_per_s"],
        "p50_us": report["p50_us"],
        "p99_us": report["p99_us"],
        "rss_mib": rss_mib,
        "threads": threads,
    }


def ort_baseline(out, batches, seconds):
    """ONNX Runtime in-process on mlp_large: CPU µs per inference at each batch size."""
    model = os.path.join(out, "models", "mlp_large", "1", "model.onnx")
    return ort_inprocess(model, "INPUT", 256, batches, seconds)


def ort_inprocess(model, inputs, features, batches, seconds):
    """ort_inprocess's CPU µs per inference of `model` at each batch size, on one thread."""
    text = subprocess.run([ORT_INPROCESS, model, inputs, str(features), ",".join(map(str, batches)), "1",
                           str(seconds)], check=True, capture_output=True, text=True).stdout
    return {int(r["batch"]): float(r["cpu_us_per_inference"]) for r in csv.DictReader(text.splitlines())}


def served_mlp_large(out, batches, window_ms, log):
    """mlp_large served by Nereid at concurrency 1, one request of each batch size at a
    time: server CPU µs per inference, plus the load's own figures."""
    models = os.path.join(out, "models")
    process = subprocess.Popen([NEREID, "--model-repository", models, "--http-port", "18100",
                                "--grpc-port", "18101", "--metrics-port", "18102",
                                "--model-control-mode", "explicit", "--load-model", "mlp_large_one"],
                               stdout=log, stderr=log)
    server = Server("nereid", process.pid, 18100, 18101, process.terminate)
    try:
        wait_ready(18100)
        figures = {}
        for batch in batches:
            path = os.path.join(out, f"mlp_large_b{batch}.csv")
            command = load_command("nereid-bench", server, "mlp_large_one", "grpc", 1, window_ms, path)
            success0, inferences0 = server.counts("mlp_large_one")
            ticks0 = server.cpu_ticks()
            subprocess.run(command + ["-b", str(batch)], check=True, capture_output=True, timeout=600, cwd=out)
            ticks1 = server.cpu_ticks()
            _, inferences1 = server.counts("mlp_large_one")
            figures[batch] = cpu_figures(ticks0, ticks1, inferences1 - inferences0)["cpu_us_per_request"]
        return figures
    finally:
        server.stop()
        process.wait(timeout=60)


def build_alloc_shim(out):
    """scripts/alloc_count.c compiled into OUT, built at bench time as it is a few lines of
    C that the Rust build does not know."""
    shim = os.path.join(out, "alloc_count.so")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", shim, os.path.join(ROOT, "scripts", "alloc_count.c"),
                    "-ldl"], check=True)
    return shim


def read_alloc_counters(path):
    """alloc_count.c's counters from the shared file: a dict of ALLOC_COUNTERS."""
    with open(path, "rb") as f:
        data = f.read(8 * len(ALLOC_COUNTERS))
    return dict(zip(ALLOC_COUNTERS, struct.unpack(f"<{len(ALLOC_COUNTERS)}Q", data)))


def measure_allocs(server, counter_path, cell, tool, out):
    """One short load on a server under the shim: allocations and bytes per request (every
    allocating call counts, realloc included). The requests are the server's statistics,
    read outside the counter readings so that their own allocations stay out; a load's
    warm-up is in both."""
    model = CELLS[cell][1] if server.name == "triton" else CELLS[cell][0]
    _, _, protocol, concurrency = CELLS[cell]
    path = os.path.join(out, f"allocs_{server.name}_{cell}_{tool}.csv")
    success0, _ = server.counts(model)
    before = read_alloc_counters(counter_path)
    if tool == "wrk":
        run_wrk(server, model, concurrency, ALLOC_WINDOW_MS, out)
    else:
        run = subprocess.run(load_command(tool, server, model, protocol, concurrency, ALLOC_WINDOW_MS, path),
                             capture_output=True, text=True, timeout=120, cwd=out)
        if run.returncode != 0:
            raise RuntimeError(f"{tool} against {server.name} {model} failed: {(run.stdout + run.stderr)[-400:]}")
    after = read_alloc_counters(counter_path)
    success1, _ = server.counts(model)
    requests = success1 - success0
    delta = {k: after[k] - before[k] for k in ALLOC_COUNTERS}
    allocations = delta["malloc"] + delta["calloc"] + delta["realloc"] + delta["aligned"]
    return {"cell": cell, "tool": tool, "server": server.name, "requests": requests, **delta,
            "allocations_per_request": allocations / requests if requests else float("nan"),
            "bytes_per_request": delta["bytes"] / requests if requests else float("nan"),
            "frees_per_request": delta["free"] / requests if requests else float("nan")}


def allocations(out, names, log, failed):
    """--allocs: Nereid (and Triton when in `names`) started afresh under the shim, each
    with its own counter file, measured on ALLOC_RUNS and stopped. A server that fails is
    noted in `failed` and the other one still measured."""
    shim = build_alloc_shim(out)
    rows = []
    for name in ("nereid", "triton"):
        if name not in names:
            continue
        counter_path = os.path.join(out, f"alloc_counts_{name}.bin")
        with open(counter_path, "wb") as f:
            f.write(bytes(4096))
        env = {"LD_PRELOAD": shim, "NEREID_ALLOC_COUNT_FILE": counter_path}
        try:
            server = start_nereid(18010, False, log, env_extra=env) if name == "nereid" else \
                start_triton(28010, env_extra=env)
            try:
                for cell, tool in ALLOC_RUNS:
                    row = measure_allocs(server, counter_path, cell, tool, out)
                    rows.append(row)
                    print(f"allocs {cell:15} {tool:13} {name:6} {row['allocations_per_request']:7.1f} "
                          f"allocations/req {row['bytes_per_request']:9.0f} bytes/req ({row['requests']} requests)",
                          flush=True)
            finally:
                server.stop()
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            failed[f"{name} under the allocation counter"] = str(e)
            print(f"allocs {name} FAILED: {e}", flush=True)
    return rows


def summarize_allocs(rows):
    """The allocation table: per cell, each server's allocations, bytes and frees per request."""
    lines = ["| cell (under alloc_count.so) | load | server | allocations/req | bytes/req | frees/req "
             "| requests |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['cell']} | {r['tool']} | {r['server']} | {r['allocations_per_request']:.1f} "
                     f"| {r['bytes_per_request']:,.0f} | {r['frees_per_request']:.1f} | {r['requests']} |")
    return "\n".join(lines)


def median(values):
    return statistics.median(values) if values else float("nan")


FIGURES = ("cpu_us_per_request", "user_us_per_request", "sys_us_per_request", "infer_per_s", "p50_us", "p99_us")


def medians(rows, cell, tool, servers):
    """server -> the median of each of FIGURES over the rounds, for servers that have rows."""
    picked = {s: [r for r in rows if r["cell"] == cell and r["tool"] == tool and r["server"] == s] for s in servers}
    return {s: {k: median([r[k] for r in mine]) for k in FIGURES} for s, mine in picked.items() if mine}


def cpu_text(fig):
    """user+sys=total µs per request, in one table cell."""
    return f"{fig['user_us_per_request']:.1f}+{fig['sys_us_per_request']:.1f}={fig['cpu_us_per_request']:.1f}"


def summarize(rows, cells, tools, reference):
    """The table of medians over the rounds: `reference` (triton or base) against nereid."""
    ref = "Triton" if reference == "triton" else "base"
    lines = [f"| cell | load | {ref} µs CPU/req user+sys=total | Nereid µs CPU/req user+sys=total | ratio "
             f"| {ref} infer/s | Nereid infer/s | {ref} p50/p99 µs | Nereid p50/p99 µs |",
             "|---|---|---|---|---|---|---|---|---|"]
    for cell in cells:
        for tool in tools:
            fig = medians(rows, cell, tool, (reference, "nereid"))
            if len(fig) < 2:
                continue
            t, n = fig[reference], fig["nereid"]
            lines.append(f"| {cell} | {tool} | {cpu_text(t)} | {cpu_text(n)} "
                         f"| {n['cpu_us_per_request'] / t['cpu_us_per_request']:.2f} | {t['infer_per_s']:,.0f} "
                         f"| {n['infer_per_s']:,.0f} | {t['p50_us']:.0f}/{t['p99_us']:.0f} "
                         f"| {n['p50_us']:.0f}/{n['p99_us']:.0f} |")
    return "\n".join(lines)


def summarize_floor(rows, cells):
    """The HTTP floor under wrk: nginx, hyper_floor (plain and with the hand-off), Nereid and
    Triton in CPU per request (medians over the rounds) and each server's total over nginx's."""
    names = ("nginx", "hyper", "handoff", "nereid", "triton")
    lines = ["| cell (wrk) | nginx µs CPU/req user+sys=total | hyper_floor | hyper_floor --handoff "
             "| Nereid | Triton | hyper_floor/nginx | handoff/nginx | Nereid/nginx | Triton/nginx "
             "| nginx/hyper_floor/handoff/Nereid/Triton req/s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for cell in cells:
        fig = medians(rows, cell, "wrk", names)
        if "nginx" not in fig:
            continue
        floor = fig["nginx"]["cpu_us_per_request"]
        texts = [cpu_text(fig[s]) if s in fig else "–" for s in names]
        ratios = [f"{fig[s]['cpu_us_per_request'] / floor:.2f}" if s in fig else "–" for s in names[1:]]
        rates = "/".join(f"{fig[s]['infer_per_s']:,.0f}" if s in fig else "–" for s in names)
        lines.append(f"| {cell} | {' | '.join(texts)} | {' | '.join(ratios)} | {rates} |")
    return "\n".join(lines)


def summarize_grpc_floor(rows, cells):
    """The gRPC floor under nereid-bench: grpc_floor (tonic), Nereid and Triton in CPU per
    request (medians over the rounds), each over the floor, and Nereid and the floor over Triton."""
    names = ("tonic", "nereid", "triton")
    lines = ["| cell (nereid-bench) | grpc_floor µs CPU/req user+sys=total | Nereid µs CPU/req user+sys=total "
             "| Triton µs CPU/req user+sys=total | Nereid/grpc_floor | grpc_floor/Triton | Nereid/Triton "
             "| grpc_floor/Nereid/Triton infer/s |", "|---|---|---|---|---|---|---|---|"]
    for cell in cells:
        fig = medians(rows, cell, "nereid-bench", names)
        if "tonic" not in fig:
            continue
        total = {s: fig[s]["cpu_us_per_request"] for s in fig}

        def ratio(a, b):
            return f"{total[a] / total[b]:.2f}" if a in total and b in total else "–"

        texts = [cpu_text(fig[s]) if s in fig else "–" for s in names]
        rates = "/".join(f"{fig[s]['infer_per_s']:,.0f}" if s in fig else "–" for s in names)
        lines.append(f"| {cell} | {' | '.join(texts)} | {ratio('nereid', 'tonic')} | {ratio('tonic', 'triton')} "
                     f"| {ratio('nereid', 'triton')} | {rates} |")
    return "\n".join(lines)


def cell_tools(cell, tools):
    """The loads `cell` runs: `tools` as given, or by default perf_analyzer and nereid-bench
    everywhere plus wrk on the cache_http cells, where the nginx floor has a meaning; wrk
    speaks HTTP only."""
    if tools is None:
        tools = ["perf_analyzer", "nereid-bench"] + (["wrk"] if cell.startswith("cache_http") else [])
    return [t for t in tools if t != "wrk" or CELLS[cell][2] == "http"]


def takes_part(server, cell, tool):
    """nginx and hyper_floor answer every request with the cache hit's body and keep no
    statistics, so they stand in only for add_sub over HTTP (the cache hit or the model),
    and only under wrk (which counts the requests); grpc_floor only for the gRPC cache hit, under nereid-bench (it
    answers the metadata, config and statistics calls nereid-bench makes, not
    perf_analyzer's)."""
    if server == "tonic":
        return tool == "nereid-bench" and cell.startswith("cache_grpc")
    return server not in FLOORS or (tool == "wrk" and cell.startswith(("cache_http", "model_http")))


def start_servers(args, names, plan, with_python, log, extra):
    """The servers of the CPU rounds, into a dict the caller stops even when one of them
    fails to start (it is filled as they come up)."""
    servers = {}
    try:
        if "nereid" in names:
            servers["nereid"] = start_nereid(18000, with_python, log, extra=extra("nereid"))
        if "triton" in names:
            servers["triton"] = start_triton(28000, extra("triton"))
        if args.base:
            servers["base"] = start_nereid(19000, with_python, log, args.base, "base", extra("base"))
        floors = [f for f in ("nginx", "hyper", "handoff") if f in names]
        if floors and any("wrk" in plan[cell] and takes_part("nginx", cell, "wrk") for cell in plan):
            # The body a floor returns is the one Nereid answers (Triton's where Nereid is not run).
            source = servers.get("nereid") or servers.get("base") or servers.get("triton")
            if not source:
                raise SystemExit("nginx and hyper_floor answer with a server's body: run them beside nereid or triton")
            answer = infer_answer(source.http)
            if "nginx" in floors:
                servers["nginx"] = start_nginx(NGINX_PORT, args.out, answer, log)
            if "hyper" in floors:
                servers["hyper"] = start_hyper_floor(HYPER_PORT, args.out, answer, log)
            if "handoff" in floors:
                servers["handoff"] = start_hyper_floor(HANDOFF_PORT, args.out, answer, log, handoff=True)
        if "tonic" in names and any(takes_part("tonic", cell, tool) for cell in plan for tool in plan[cell]):
            source = servers.get("nereid") or servers.get("base") or servers.get("triton")
            if not source:
                raise SystemExit("grpc_floor answers with a server's answers: run it beside nereid or triton")
            servers["tonic"] = start_grpc_floor(TONIC_PORT, args.out, source, log)
    except BaseException:
        for server in servers.values():
            server.stop()
        raise
    return servers


def main():
    global NEREID, BENCH, ORT_INPROCESS
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "vs_triton"))
    parser.add_argument("--rounds", type=int, default=3, help="0 skips the CPU rounds (e.g. for --allocs alone)")
    parser.add_argument("--window-ms", type=int, default=1500)
    parser.add_argument("--cells", default=",".join(DEFAULT_CELLS), help=f"of {', '.join(CELLS)}")
    parser.add_argument("--tools", help="of perf_analyzer, nereid-bench, wrk (HTTP cells only); default: "
                        "perf_analyzer,nereid-bench, plus wrk on the cache_http cells")
    parser.add_argument("--servers", default="nereid,triton,nginx,hyper,handoff,tonic",
                        help="nereid alone for quick iterations; nginx, hyper and handoff (hyper_floor) "
                        "serve only add_sub's HTTP cells under wrk, tonic (grpc_floor) only cache_grpc cells under nereid-bench")
    parser.add_argument("--base", help="another nereid binary to put beside this build (before/after)")
    parser.add_argument("--nereid", default=NEREID, help="the nereid binary (a copy, while target/ rebuilds)")
    parser.add_argument("--bench", default=BENCH, help="the nereid-bench binary")
    parser.add_argument("--ort-inprocess", default=ORT_INPROCESS, help="the ort_inprocess example binary")
    parser.add_argument("--ort-batches", default="1,8,32", help="'' skips the in-process ONNX Runtime part")
    parser.add_argument("--trace-levels", default="", help=f"of {', '.join(TRACE_LEVELS)}: cells per level")
    parser.add_argument("--trace-mode", default="triton", choices=("triton", "opentelemetry"))
    parser.add_argument("--allocs", action="store_true",
                        help="allocations per request on separate servers under scripts/alloc_count.c: "
                        + ", ".join(f"{cell} ({tool})" for cell, tool in ALLOC_RUNS))
    args = parser.parse_args()
    NEREID, BENCH, ORT_INPROCESS = (os.path.abspath(p) for p in (args.nereid, args.bench, args.ort_inprocess))
    # A SIGTERM unwinds like Ctrl-C, so the finally blocks stop every server started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.makedirs(args.out, exist_ok=True)
    with_python = os.path.isfile(os.path.join(PY_BACKENDS, "python", "triton_python_backend_stub")) and \
        os.path.isdir(STUB_VENV)
    cells = [c for c in args.cells.split(",") if c and (with_python or not c.startswith("python"))]
    tools = [t for t in args.tools.split(",") if t] if args.tools is not None else None
    plan = {cell: cell_tools(cell, tools) for cell in cells}
    all_tools = list(dict.fromkeys(t for chosen in plan.values() for t in chosen))
    if "wrk" in all_tools and args.rounds > 0 or args.allocs:
        ensure_nginx_and_wrk()
    names = [s for s in args.servers.split(",") if s]
    levels = [level for level in args.trace_levels.split(",") if level]
    log = open(os.path.join(args.out, "servers.log"), "w")
    servers = {}
    at_rest = {}
    rows = []
    failed = {}
    collector, received = start_collector() if levels and args.trace_mode == "opentelemetry" else (None, [0])

    def extra(name):
        if not levels:
            return ()
        return trace_flags(args.trace_mode, args.out, name, collector.server_address[1] if collector else 0)

    try:
        if args.rounds > 0:
            servers = start_servers(args, names, plan, with_python, log, extra)
        at_rest = {name: server.footprint() for name, server in servers.items()}
        for round_ in range(args.rounds):
            order = list(servers.values()) if round_ % 2 == 0 else list(servers.values())[::-1]
            for level in levels or [None]:
                for server in servers.values():
                    if level and server.name not in failed and server.name not in FLOORS:
                        try:
                            set_trace_level(server, level)
                        except OSError as e:
                            failed[server.name] = f"setting trace level {level}: {e}"
                for cell in cells:
                    for tool in plan[cell]:
                        for server in order:
                            if server.name in failed or not takes_part(server.name, cell, tool):
                                continue
                            model = CELLS[cell][1] if server.name == "triton" else CELLS[cell][0]
                            _, _, protocol, concurrency = CELLS[cell]
                            label = f"{cell}@{level}" if level else cell
                            path = os.path.join(args.out, f"{server.name}_{label}_{tool}_r{round_}.csv")
                            row = measure_steadily(tool, server, model, protocol, concurrency,
                                                   args.window_ms, path)
                            if isinstance(row, Exception):
                                if answers(server):
                                    # The load found no steady window on this busy machine:
                                    # this cell of this round is left out, the server stays.
                                    print(f"round {round_} {label} {server.name} skipped: {row}", flush=True)
                                    continue
                                # A server that stops answering is left out from here on; the
                                # report keeps what it measured before.
                                failed[server.name] = f"{label}: {row}"
                                print(f"round {round_} {label} {server.name} FAILED: {row}", flush=True)
                                continue
                            row.update(round=round_, cell=label, tool=tool, server=server.name)
                            rows.append(row)
                            print(f"round {round_} {label:15} {tool:13} {server.name:6} {cpu_text(row):>18} "
                                  f"µs CPU/req {row['infer_per_s']:9.0f} "
                                  f"infer/s p50 {row['p50_us']:6.0f} p99 {row['p99_us']:6.0f}", flush=True)
    finally:
        for server in servers.values():
            server.stop()
        if collector:
            collector.shutdown()
            print(f"the OTLP receiver took {received[0]:,} bytes")
    if levels:
        cells = [f"{cell}@{level}" for cell in cells for level in levels]
    with open(os.path.join(args.out, "rows.json"), "w") as f:
        json.dump(rows, f, indent=1)
    report = []
    if at_rest:
        report += ["| server | RSS MiB at rest | threads at rest | most RSS MiB after a load "
                   "| most threads after a load |", "|---|---|---|---|---|"]
    for name, (rss, threads) in at_rest.items():
        mine = [r for r in rows if r["server"] == name]
        report.append(f"| {name} | {rss:.1f} | {threads} | {max((r['rss_mib'] for r in mine), default=0):.1f} "
                      f"| {max((r['threads'] for r in mine), default=0)} |")
    for reference in ("triton", "base"):
        if reference in servers and "nereid" in servers:
            report += ["", summarize(rows, cells, all_tools, reference)]
    if "nginx" in servers:
        report += ["", summarize_floor(rows, cells)]
    if "tonic" in servers:
        report += ["", summarize_grpc_floor(rows, cells)]
    batches = [int(b) for b in args.ort_batches.split(",") if b]
    if batches:
        subprocess.run([os.path.join(ROOT, ".venv", "bin", "python"), os.path.join(ROOT, "scripts", "make_bench_models.py"),
                        os.path.join(args.out, "models")], check=True, capture_output=True)
        make_one_instance(os.path.join(args.out, "models"))
        inprocess = ort_baseline(args.out, batches, 3)
        served = served_mlp_large(args.out, batches, args.window_ms, log)
        report += ["", "| mlp_large batch | ONNX Runtime in-process µs CPU/inference "
                   "| Nereid served µs CPU/inference | ratio |", "|---|---|---|---|"]
        for b in batches:
            report.append(f"| {b} | {inprocess[b]:.1f} | {served[b]:.1f} | {served[b] / inprocess[b]:.2f} |")
        add_sub = ort_inprocess(os.path.join(ROOT, "examples", "models", "add_sub", "1", "model.onnx"),
                                "INPUT0,INPUT1", 4, [1], 3)[1]
        report += ["", f"add_sub run by ONNX Runtime in-process (one thread, batch 1): {add_sub:.1f} µs CPU per "
                   "run, the compute floor of the add_sub cells"]
    if args.allocs:
        alloc_rows = allocations(args.out, names, log, failed)
        with open(os.path.join(args.out, "allocs.json"), "w") as f:
            json.dump(alloc_rows, f, indent=1)
        report += ["", summarize_allocs(alloc_rows)]
    report += [f"- {name} stopped answering at {why}" for name, why in failed.items()]
    text = "\n".join(report) + "\n"
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    print("\n" + text)
    return 0


def make_one_instance(models):
    """mlp_large_one: mlp_large with one instance and no dynamic batcher, so each request
    runs as sent, as the in-process baseline runs one session on one thread."""
    source = os.path.join(models, "mlp_large")
    target = os.path.join(models, "mlp_large_one")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    path = os.path.join(target, "config.pbtxt")
    with open(path) as f:
        text = f.read()
    text = text.replace('name: "mlp_large"', 'name: "mlp_large_one"').replace("count: 2", "count: 1")
    text = text.replace("dynamic_batching { }", "")
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main())
