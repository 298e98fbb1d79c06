#!/usr/bin/env python3
"""bench_llm.py: a load generator for any OpenAI-compatible text-completion server.

It drives POST /v1/completions with `stream: true` (Server-Sent Events), greedy sampling
(`temperature: 0`) and `ignore_eos: true`, so every request generates exactly --max-tokens
tokens whatever the model says, from a fixed, deterministic set of prompts, at one or more
concurrency levels. Per request it measures the time to first token (TTFT: until the first
chunk that carries non-empty text) and the inter-token latency (ITL: the gaps between text
chunks, and TPOT: (last - first text chunk) / (tokens - 1)); per level, the output tokens/s
over the wall time of the level. Tokens are counted from the final `usage` chunk when the
server honours `stream_options: {include_usage: true}`, else one per text chunk.

With --server-pid (a process on this machine) it also reads that process's CPU time
(utime + stime from /proc/PID/stat, all threads) before and after each level and reports
CPU milliseconds per generated token and the mean number of cores kept busy; it also reads
/proc/stat to tell how many cores other processes kept busy meanwhile, and flags a level run
on a machine that was not quiet (on a small machine, an OpenMP ggml build with -t = cores
stalls badly when anything else runs).

It is a client only: start the server (llama-server, Nereid, vLLM, ...) yourself. Standard
library only (threads + http.client).

    python3 scripts/bench_llm.py --url http://127.0.0.1:8080 --concurrency 1,8 \
        --requests 16 --max-tokens 64 --server-pid $(pgrep -n llama-server) --label llama-server
"""

import argparse
import http.client
import json
import os
import queue
import statistics
import sys
import threading
import time
import urllib.parse

# Fixed prompts, used round-robin: request i gets PROMPTS[i % len(PROMPTS)] behind a tag of
# its own (prompt_for), so no server answers from a prompt cache (llama-server keeps each
# slot's last prompt and would skip the prefill of a repeated one). Mixed lengths
# (a few tokens to ~60) so prefill is not all identical, but the same every run.
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time",
    "Explain in simple terms why the sky is blue.",
    "Write a short poem about the sea.",
    "List three uses of a paperclip:",
    "The quick brown fox",
    "In the year 2050, cities will",
    "Translate to French: The weather is nice today.",
    "Q: What is the boiling point of water at sea level?\nA:",
    "A recipe for pancakes:\n1.",
    "import numpy as np\n\ndef normalize(x):",
    "The three laws of thermodynamics are",
    "Dear hiring manager, I am writing to apply for",
    "Summarize the plot of a heist movie in which a team of retired engineers plans to "
    "steal a famous painting from a museum that is protected by an AI security system, "
    "and one of them secretly works for the museum.",
    "SELECT name, COUNT(*) FROM orders",
]


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def machine_busy_seconds():
    """CPU seconds spent busy by the whole machine (all cores), from /proc/stat; None if unreadable."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds():
    t = os.times()
    return t.user + t.system


def proc_cpu_seconds(pid):
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    # comm (field 2) may contain spaces: split after its closing parenthesis
    fields = stat[stat.rindex(")") + 2:].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of stat(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


class Endpoint:
    def __init__(self, url):
        u = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
        if u.scheme not in ("http", "https"):
            raise SystemExit(f"bench_llm.py: unsupported URL scheme in {url!r}")
        self.scheme = u.scheme
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if u.scheme == "https" else 80)
        base = u.path.rstrip("/")
        if base.endswith("/completions"):
            self.completions = base
            base = base[: -len("/completions")]
        else:
            if not base.endswith("/v1"):
                base += "/v1"
            self.completions = base + "/completions"
        self.models = base + "/models"

    def connect(self, timeout):
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)


def discover_model(ep, timeout):
    try:
        conn = ep.connect(timeout)
        conn.request("GET", ep.models)
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        if resp.status == 200:
            data = json.loads(body).get("data") or []
            if data and data[0].get("id"):
                return data[0]["id"]
    except (OSError, ValueError, http.client.HTTPException):
        pass
    return "default"


def one_request(ep, model, prompt, args):
    """Send one streaming completion; return a dict of timings and counts."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": args.max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if not args.no_ignore_eos:
        body["ignore_eos"] = True
    payload = json.dumps(body).encode()
    res = {"ok": False, "error": None, "ttft": None, "gaps": [], "chunks": 0,
           "tokens": 0, "usage_tokens": None, "finish_reason": None, "t_first": None,
           "t_last": None}
    t0 = time.perf_counter()
    conn = None
    try:
        conn = ep.connect(args.timeout)
        conn.request("POST", ep.completions, body=payload,
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            res["error"] = f"HTTP {resp.status}: {resp.read()[:200]!r}"
            return res
        last = None
        done = False
        while not done:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators, comments, event: lines
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            if "error" in chunk:
                res["error"] = f"server error: {json.dumps(chunk['error'])[:200]}"
                return res
            now = time.perf_counter()
            for choice in chunk.get("choices") or []:
                if choice.get("text"):
                    res["chunks"] += 1
                    if last is None:
                        res["ttft"] = now - t0
                        res["t_first"] = now
                    else:
                        res["gaps"].append(now - last)
                    last = now
                if choice.get("finish_reason"):
                    res["finish_reason"] = choice["finish_reason"]
            usage = chunk.get("usage")
            if usage and usage.get("completion_tokens") is not None:
                res["usage_tokens"] = int(usage["completion_tokens"])
        res["t_last"] = last
        res["tokens"] = res["usage_tokens"] if res["usage_tokens"] is not None else res["chunks"]
        res["ok"] = res["chunks"] > 0
        if not res["ok"]:
            res["error"] = "no text chunk in the stream"
    except (OSError, http.client.HTTPException) as e:
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        res["latency"] = time.perf_counter() - t0
        if conn is not None:
            conn.close()
    return res


def run_level(ep, model, concurrency, n_requests, args, offset=0):
    jobs = queue.Queue()
    for i in range(n_requests):
        jobs.put(offset + i)
    results = []
    lock = threading.Lock()

    def worker():
        while True:
            try:
                i = jobs.get_nowait()
            except queue.Empty:
                return
            r = one_request(ep, model, prompt_for(i, concurrency), args)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    cpu0 = proc_cpu_seconds(args.server_pid) if args.server_pid else None
    machine0, own0 = machine_busy_seconds(), own_cpu_seconds()
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    cpu1 = proc_cpu_seconds(args.server_pid) if args.server_pid else None
    machine1, own1 = machine_busy_seconds(), own_cpu_seconds()
    out = summarize(concurrency, results, wall, cpu0, cpu1, args)
    out["client_cores_busy"] = (own1 - own0) / wall if wall > 0 else float("nan")
    if machine0 is not None and machine1 is not None and cpu0 is not None and wall > 0:
        # what neither the server nor this client used: other load that skews the numbers
        out["other_cores_busy"] = max(0.0, (machine1 - machine0) - (cpu1 - cpu0) - (own1 - own0)) / wall
    return out


def summarize(concurrency, results, wall, cpu0, cpu1, args):
    ok = [r for r in results if r["ok"]]
    errors = [r["error"] for r in results if not r["ok"]]
    tokens = sum(r["tokens"] for r in ok)
    ttfts = [r["ttft"] for r in ok]
    gaps = [g for r in ok for g in r["gaps"]]
    tpots = [(r["t_last"] - r["t_first"]) / (r["tokens"] - 1) for r in ok if r["tokens"] > 1]
    finish = {}
    for r in ok:
        finish[r["finish_reason"]] = finish.get(r["finish_reason"], 0) + 1
    out = {
        "concurrency": concurrency,
        "requests": len(results),
        "ok": len(ok),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "wall_s": wall,
        "output_tokens": tokens,
        "text_chunks": sum(r["chunks"] for r in ok),
        "tokens_from_usage": all(r["usage_tokens"] is not None for r in ok) if ok else False,
        "short_requests": sum(1 for r in ok if r["tokens"] < args.max_tokens),
        "finish_reasons": finish,
        "output_tok_per_s": tokens / wall if wall > 0 else float("nan"),
        "requests_per_s": len(ok) / wall if wall > 0 else float("nan"),
        "ttft_ms": {"mean": 1e3 * statistics.fmean(ttfts) if ttfts else float("nan"),
                    "p50": 1e3 * percentile(ttfts, 50), "p90": 1e3 * percentile(ttfts, 90),
                    "p99": 1e3 * percentile(ttfts, 99)},
        "itl_ms": {"mean": 1e3 * statistics.fmean(gaps) if gaps else float("nan"),
                   "p50": 1e3 * percentile(gaps, 50), "p90": 1e3 * percentile(gaps, 90),
                   "p99": 1e3 * percentile(gaps, 99)},
        "tpot_ms_mean": 1e3 * statistics.fmean(tpots) if tpots else float("nan"),
        "latency_s_mean": statistics.fmean([r["latency"] for r in ok]) if ok else float("nan"),
    }
    if cpu0 is not None:
        cpu = cpu1 - cpu0
        out["server_cpu_s"] = cpu
        out["server_cpu_ms_per_token"] = 1e3 * cpu / tokens if tokens else float("nan")
        out["server_cores_busy"] = cpu / wall if wall > 0 else float("nan")
    return out


def print_table(label, rows, has_cpu):
    cols = [("conc", 5), ("ok/req", 7), ("tok/s", 8), ("req/s", 7), ("TTFT p50", 9),
            ("TTFT p90", 9), ("ITL p50", 8), ("ITL p90", 8), ("ITL p99", 8), ("TPOT", 7)]
    if has_cpu:
        cols += [("cpu ms/tok", 11), ("cores", 6)]
    print(f"\n{label}  (times in ms)")
    print(" ".join(name.rjust(w) for name, w in cols))
    for r in rows:
        vals = [str(r["concurrency"]), f"{r['ok']}/{r['requests']}",
                f"{r['output_tok_per_s']:.1f}", f"{r['requests_per_s']:.2f}",
                f"{r['ttft_ms']['p50']:.1f}", f"{r['ttft_ms']['p90']:.1f}",
                f"{r['itl_ms']['p50']:.2f}", f"{r['itl_ms']['p90']:.2f}",
                f"{r['itl_ms']['p99']:.2f}", f"{r['tpot_ms_mean']:.2f}"]
        if has_cpu:
            vals += [f"{r.get('server_cpu_ms_per_token', float('nan')):.2f}",
                     f"{r.get('server_cores_busy', float('nan')):.2f}"]
        print(" ".join(v.rjust(w) for v, (_, w) in zip(vals, cols)))
    for r in rows:
        notes = []
        if r["errors"]:
            notes.append(f"{r['errors']} failed, first: {r['first_error']}")
        if not r["tokens_from_usage"]:
            notes.append("no usage chunk: tokens counted as text chunks")
        if r["short_requests"]:
            notes.append(f"{r['short_requests']} requests ended before max_tokens "
                         f"(finish reasons {r['finish_reasons']}): ignore_eos not honoured?")
        if r.get("other_cores_busy", 0.0) > 0.25:
            notes.append(f"other processes kept {r['other_cores_busy']:.2f} cores busy during "
                         f"this level: the machine was not quiet, numbers are skewed")
        if notes:
            print(f"  conc {r['concurrency']}: " + "; ".join(notes))


def prompt_for(i, level):
    """Request i's prompt: a fixed prompt behind a number no other request has (this
    process, the level, the request), written last digit first so that prompts differ
    from their first token on and a prompt cache finds no common prefix to reuse."""
    tag = str(os.getpid() * 1_000_003 + (level + 1) * 1009 + i)[::-1]
    return f"{tag}. {PROMPTS[i % len(PROMPTS)]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080",
                    help="server base URL (…/v1 and …/v1/completions are accepted too)")
    ap.add_argument("--model", default=None,
                    help="model name to send (default: first id of GET /v1/models, else 'default')")
    ap.add_argument("--concurrency", default="1,8,16",
                    help="comma-separated concurrency levels (default 1,8,16)")
    ap.add_argument("--requests", type=int, default=64, help="requests per level (default 64)")
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens per request (default 128)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="requests sent (and not measured) before the first level (default 1)")
    ap.add_argument("--server-pid", type=int, default=None,
                    help="PID of the server process, for CPU seconds per generated token")
    ap.add_argument("--label", default=None, help="name of this run in the table and the JSON")
    ap.add_argument("--json-out", default=None, help="write the results as JSON to this file")
    ap.add_argument("--timeout", type=float, default=600.0, help="socket timeout per request, s")
    ap.add_argument("--no-ignore-eos", action="store_true",
                    help="do not send ignore_eos (for servers that reject unknown fields)")
    args = ap.parse_args()

    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    if not levels or min(levels) < 1 or args.requests < 1 or args.max_tokens < 1:
        ap.error("concurrency levels, --requests and --max-tokens must be positive")
    if args.server_pid is not None and not os.path.exists(f"/proc/{args.server_pid}/stat"):
        ap.error(f"--server-pid {args.server_pid}: no such process on this machine")

    ep = Endpoint(args.url)
    model = args.model or discover_model(ep, args.timeout)
    label = args.label or f"{args.url} {model}"

    for i in range(args.warmup):
        r = one_request(ep, model, prompt_for(i, -1), args)
        if not r["ok"]:
            print(f"bench_llm.py: warm-up request failed: {r['error']}", file=sys.stderr)
            return 1

    rows = []
    for c in levels:
        rows.append(run_level(ep, model, c, args.requests, args))
    print_table(label, rows, args.server_pid is not None)

    if args.json_out:
        doc = {"label": label, "url": args.url, "model": model,
               "max_tokens": args.max_tokens, "requests_per_level": args.requests,
               "ignore_eos": not args.no_ignore_eos, "server_pid": args.server_pid,
               "prompts": len(PROMPTS), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "levels": rows}
        with open(args.json_out, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    return 0 if all(r["errors"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
