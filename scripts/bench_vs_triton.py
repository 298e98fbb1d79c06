"""Nereid beside Triton 2.51 under the same load: server CPU time per request, throughput
and p50/p99 latency, with Nereid/Triton ratios. Run through scripts/bench_vs_triton.sh,
which builds what this needs.

Both servers run for the whole benchmark; every round runs each cell on Nereid and then on
Triton (the order alternates between rounds), so slow drifts of this shared machine touch
both. A cell's server CPU is the utime+stime its process and children (python backend
stubs) spent during the load, read from /proc, divided by the requests the server counted
in its statistics: the figure that stays meaningful while the load generator shares the
cores. Each figure in the table is the median over the rounds.

Cells (c = concurrency, batch 1):
  cache_http_c1/c4, cache_grpc_c1/c4  every request a response-cache hit (add_sub_cache)
  model_http_c4, model_grpc_c4        add_sub runs: Nereid's ONNX model, Triton's python one
  python_http_c4, python_grpc_c4      add_sub in Triton's python backend on both servers
                                      (only where the wheel's python backend is unpacked)
  opt-in: model_{http,grpc}_c{1,16}, cache_{http,grpc}_c16 (latency checks against --base)

With --trace-levels, each cell runs once per trace level on the same two servers, the
level set over the trace extension before the load (`off`, `timestamps`, `tensors` =
TIMESTAMPS+TENSORS, each on every request, and `timestamps@1000` = every 1000th); both
servers then start in the --trace-mode given: `triton` writes JSON trace files every
100 traces, `opentelemetry` exports to a local OTLP receiver that only counts bytes.

Then mlp_large (compute-bound) served by Nereid at concurrency 1 in requests of a fixed
batch size, against ONNX Runtime in-process on one thread, in CPU per inference. The
tables go to OUT/summary.md, every run's figures to OUT/rows.json.
"""

import argparse
import csv
import json
import os
import shutil
import statistics
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
WHEEL = os.environ.get("TRITON_CACHE") or os.path.join(tempfile.gettempdir(), "nereid-triton-wheel")
PY_BACKENDS = os.path.join(WHEEL, "unpacked", "pytriton", "tritonserver", "backends")
STUB_VENV = os.path.join(WHEEL, "stub-venv", "bin")
CLK_TCK = os.sysconf("SC_CLK_TCK")

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
        """utime+stime of the server and its live children, in clock ticks."""
        total = 0
        children = subprocess.run(["pgrep", "-P", str(self.pid)], capture_output=True, text=True).stdout
        for pid in [str(self.pid)] + children.split():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])
        return total

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
        """(successful requests, inferences) the server counted for `model`."""
        url = f"http://127.0.0.1:{self.http}/v2/models/{model}/stats"
        with urllib.request.urlopen(url, timeout=10) as answer:
            stats = json.load(answer)["model_stats"]
        success = sum(int(s["inference_stats"]["success"]["count"]) for s in stats)
        return success, sum(int(s["inference_count"]) for s in stats)

    def stop(self):
        self._stop()


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


def start_nereid(port, with_python, log, binary=NEREID, name="nereid", extra=()):
    repo = nereid_repository(with_python)
    args = [binary, "--model-repository", repo, "--http-port", str(port), "--grpc-port", str(port + 1),
            "--metrics-port", str(port + 2), "--cache-config", "local,size=1048576", *extra]
    env = dict(os.environ)
    if with_python:
        args += ["--backend-directory", PY_BACKENDS]
        env["PATH"] = STUB_VENV + os.pathsep + env.get("PATH", "")
    process = subprocess.Popen(args, stdout=log, stderr=log, env=env)
    wait_ready(port)

    def stop():
        process.terminate()
        process.wait(timeout=60)
        shutil.rmtree(repo, ignore_errors=True)

    return Server(name, process.pid, port, port + 1, stop)


def start_triton(port, extra=()):
    anchor = os.path.join(TRITON, "triton-anchor.sh")
    pid = subprocess.run([anchor, "start", "--model-repository", os.path.join(TRITON, "models"),
                          "--http-port", str(port), "--grpc-port", str(port + 1),
                          "--metrics-port", str(port + 2), *(["--", *extra] if extra else [])],
                         check=True, capture_output=True, text=True).stdout.split()[-1]
    wait_ready(port)
    return Server("triton", int(pid), port, port + 1,
                  lambda: subprocess.run([anchor, "stop", pid], capture_output=True))


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


def measure(tool, server, model, protocol, concurrency, window_ms, csv_path):
    """One load run against one server: its CPU per request and the load's own figures."""
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
    cpu_s = (ticks1 - ticks0) / CLK_TCK
    return {
        "requests": requests,
        "inferences": inferences1 - inferences0,
        "cpu_s": cpu_s,
        "cpu_us_per_request": cpu_s / requests * 1e6 if requests else float("nan"),
        "infer_per_s": float(row["Inferences/Second"]),
        "p50_us": float(row["p50 latency"]),
        "p99_us": float(row["p99 latency"]),
        "rss_mib": rss_mib,
        "threads": threads,
    }


def ort_baseline(out, batches, seconds):
    """ONNX Runtime in-process on mlp_large: CPU µs per inference at each batch size."""
    example = os.path.join(ROOT, "target", "release", "examples", "ort_inprocess")
    model = os.path.join(out, "models", "mlp_large", "1", "model.onnx")
    text = subprocess.run([example, model, "INPUT", "256", ",".join(map(str, batches)), "1", str(seconds)],
                          check=True, capture_output=True, text=True).stdout
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
            cpu_s = (ticks1 - ticks0) / CLK_TCK
            figures[batch] = cpu_s / (inferences1 - inferences0) * 1e6
        return figures
    finally:
        server.stop()
        process.wait(timeout=60)


def median(values):
    return statistics.median(values) if values else float("nan")


def summarize(rows, cells, tools, reference):
    """The table of medians over the rounds: `reference` (triton or base) against nereid."""
    ref = "Triton" if reference == "triton" else "base"
    lines = [f"| cell | load | {ref} µs CPU/req | Nereid µs CPU/req | ratio | {ref} infer/s | Nereid infer/s "
             f"| {ref} p50/p99 µs | Nereid p50/p99 µs |", "|---|---|---|---|---|---|---|---|---|"]
    for cell in cells:
        for tool in tools:
            pick = {s: [r for r in rows if r["cell"] == cell and r["tool"] == tool and r["server"] == s]
                    for s in (reference, "nereid")}
            if not pick["nereid"] or not pick[reference]:
                continue
            fig = {s: {k: median([r[k] for r in pick[s]]) for k in ("cpu_us_per_request", "infer_per_s",
                                                                     "p50_us", "p99_us")} for s in pick}
            t, n = fig[reference], fig["nereid"]
            lines.append(f"| {cell} | {tool} | {t['cpu_us_per_request']:.1f} | {n['cpu_us_per_request']:.1f} "
                         f"| {n['cpu_us_per_request'] / t['cpu_us_per_request']:.2f} | {t['infer_per_s']:,.0f} "
                         f"| {n['infer_per_s']:,.0f} | {t['p50_us']:.0f}/{t['p99_us']:.0f} "
                         f"| {n['p50_us']:.0f}/{n['p99_us']:.0f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "vs_triton"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window-ms", type=int, default=1500)
    parser.add_argument("--cells", default=",".join(DEFAULT_CELLS), help=f"of {', '.join(CELLS)}")
    parser.add_argument("--tools", default="perf_analyzer,nereid-bench")
    parser.add_argument("--servers", default="nereid,triton", help="nereid alone for quick iterations")
    parser.add_argument("--base", help="another nereid binary to put beside this build (before/after)")
    parser.add_argument("--ort-batches", default="1,8,32", help="'' skips the in-process ONNX Runtime part")
    parser.add_argument("--trace-levels", default="", help=f"of {', '.join(TRACE_LEVELS)}: cells per level")
    parser.add_argument("--trace-mode", default="triton", choices=("triton", "opentelemetry"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with_python = os.path.isfile(os.path.join(PY_BACKENDS, "python", "triton_python_backend_stub")) and \
        os.path.isdir(STUB_VENV)
    cells = [c for c in args.cells.split(",") if c and (with_python or not c.startswith("python"))]
    tools = [t for t in args.tools.split(",") if t]
    names = [s for s in args.servers.split(",") if s]
    levels = [level for level in args.trace_levels.split(",") if level]
    log = open(os.path.join(args.out, "servers.log"), "w")
    servers = {}
    rows = []
    failed = {}
    collector, received = start_collector() if levels and args.trace_mode == "opentelemetry" else (None, [0])

    def extra(name):
        if not levels:
            return ()
        return trace_flags(args.trace_mode, args.out, name, collector.server_address[1] if collector else 0)

    try:
        if "nereid" in names:
            servers["nereid"] = start_nereid(18000, with_python, log, extra=extra("nereid"))
        if "triton" in names:
            servers["triton"] = start_triton(28000, extra("triton"))
        if args.base:
            servers["base"] = start_nereid(19000, with_python, log, args.base, "base", extra("base"))
        at_rest = {name: server.footprint() for name, server in servers.items()}
        for round_ in range(args.rounds):
            order = list(servers.values()) if round_ % 2 == 0 else list(servers.values())[::-1]
            for level in levels or [None]:
                for server in servers.values():
                    if level and server.name not in failed:
                        try:
                            set_trace_level(server, level)
                        except OSError as e:
                            failed[server.name] = f"setting trace level {level}: {e}"
                for cell in cells:
                    for tool in tools:
                        for server in order:
                            if server.name in failed:
                                continue
                            model = CELLS[cell][1] if server.name == "triton" else CELLS[cell][0]
                            _, _, protocol, concurrency = CELLS[cell]
                            label = f"{cell}@{level}" if level else cell
                            path = os.path.join(args.out, f"{server.name}_{label}_{tool}_r{round_}.csv")
                            try:
                                row = measure(tool, server, model, protocol, concurrency, args.window_ms,
                                              path)
                            except (RuntimeError, OSError) as e:
                                # A server that stops answering is left out from here on; the
                                # report keeps what it measured before.
                                failed[server.name] = f"{label}: {e}"
                                print(f"round {round_} {label} {server.name} FAILED: {e}", flush=True)
                                continue
                            row.update(round=round_, cell=label, tool=tool, server=server.name)
                            rows.append(row)
                            print(f"round {round_} {label:15} {tool:13} {server.name:6} "
                                  f"{row['cpu_us_per_request']:7.1f} µs CPU/req {row['infer_per_s']:9.0f} "
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
    report = ["| server | RSS MiB at rest | threads at rest | most RSS MiB after a load | most threads after a load |",
              "|---|---|---|---|---|"]
    for name, (rss, threads) in at_rest.items():
        mine = [r for r in rows if r["server"] == name]
        report.append(f"| {name} | {rss:.1f} | {threads} | {max(r['rss_mib'] for r in mine):.1f} "
                      f"| {max(r['threads'] for r in mine)} |")
    for reference in ("triton", "base"):
        if reference in servers and "nereid" in servers:
            report += ["", summarize(rows, cells, tools, reference)]
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
