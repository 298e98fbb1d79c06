#!/usr/bin/env bash
# BENCHMARKS §26: Nereid's llama.cpp backend beside llama.cpp's own llama-server, one after
# the other in one run (two OpenMP servers on a small machine stall each other), same GGUF,
# same threads, same slots and context per slot, driven by the same client
# (scripts/bench_llm.py: streamed /v1/completions, greedy, ignore_eos, fixed prompts).
# Besides the client's figures it reads each server's CPU time per thread from /proc and
# splits Nereid's into the engine (its llamacpp-* threads and the OpenMP workers they
# start, which inherit the name) and everything else (HTTP, OpenAI frontend, scheduling).
#
# Each level runs twice per server, the servers taking turns.
# Needs: target/release/nereid (scripts/setup.sh), a llama-server binary (LLAMA_SERVER,
# built from llama.cpp with the ggml options of .cargo/config.toml; llama.cpp's sources
# are not kept here), the example GGUF (scripts/fetch_llm.sh).
#   LLAMA_SERVER=/path/llama-server scripts/bench_llamacpp.sh [MAX_TOKENS] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_SERVER="${LLAMA_SERVER:-/var/cache/nereid/llama-server/bin/llama-server}"
MAX_TOKENS="${1:-128}"
THREADS="${2:-2}"
SLOTS=16
CTX=512
GGUF="$(scripts/fetch_llm.sh)"
PY=.venv/bin/python
[ -x "$LLAMA_SERVER" ] || { echo "bench_llamacpp: no llama-server at $LLAMA_SERVER (set LLAMA_SERVER)" >&2; exit 1; }
[ -x target/release/nereid ] || { echo "bench_llamacpp: build nereid first (scripts/setup.sh)" >&2; exit 1; }

out="$(mktemp -d)"
repo="$out/models"
mkdir -p "$repo/llm/1"
echo 'backend: "llamacpp"' > "$repo/llm/config.pbtxt"
printf '{"model": "%s", "context_length": %d, "max_num_seqs": %d, "threads": %d}\n' \
  "$GGUF" "$CTX" "$SLOTS" "$THREADS" > "$repo/llm/1/model.json"

# CPU seconds of PID's threads, split by whether the thread's name starts with $2.
thread_cpu() {
  "$PY" - "$1" "$2" <<'PY'
import os, sys
pid, prefix = sys.argv[1], sys.argv[2]
tick = os.sysconf("SC_CLK_TCK")
inside = outside = 0
for tid in os.listdir(f"/proc/{pid}/task"):
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            stat = f.read()
    except OSError:
        continue
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2:].split()
    cpu = (int(fields[11]) + int(fields[12])) / tick
    if prefix and name.startswith(prefix):
        inside += cpu
    else:
        outside += cpu
print(f"{inside} {outside}")
PY
}

wait_http() {
  for _ in $(seq 1 200); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "bench_llamacpp: $1 did not come up" >&2; exit 1
}

bench() { # label url pid thread-prefix conc round
  local label="$1" url="$2" pid="$3" prefix="$4" conc="$5" round="$6"
  local requests=$(( conc == 1 ? 12 : 32 ))
  read -r in0 out0 < <(thread_cpu "$pid" "$prefix")
  "$PY" scripts/bench_llm.py --url "$url" --model llm --concurrency "$conc" \
    --requests "$requests" --max-tokens "$MAX_TOKENS" --server-pid "$pid" \
    --label "$label" --json-out "$out/$label-$conc-$round.json" | tail -n 1 | sed "s/^/$label /"
  read -r in1 out1 < <(thread_cpu "$pid" "$prefix")
  echo "$in0 $in1 $out0 $out1 $(( requests * MAX_TOKENS ))" > "$out/$label-$conc-$round.cpu"
}

# Both servers stay up (idle, neither uses CPU) and take turns, level by level and
# twice each, so a change in the machine's speed between minutes (this VM varies by
# about 20%) falls on both alike.
echo "== llama-server -t $THREADS -np $SLOTS -c $((SLOTS * CTX)) | nereid threads $THREADS, max_num_seqs $SLOTS, context_length $CTX"
"$LLAMA_SERVER" -m "$GGUF" -c $((SLOTS * CTX)) -np "$SLOTS" -t "$THREADS" --host 127.0.0.1 \
  --port 18480 >"$out/llama-server.log" 2>&1 &
lpid=$!
target/release/nereid --model-repository "$repo" --http-port 18481 --grpc-port 18482 \
  --metrics-port 18483 --openai-port 18484 --openai-address 127.0.0.1 >"$out/nereid.log" 2>&1 &
npid=$!
trap 'kill $lpid $npid 2>/dev/null || true' EXIT
wait_http http://127.0.0.1:18480/health
wait_http http://127.0.0.1:18481/v2/models/llm/ready
echo "     conc  ok/req    tok/s   req/s  TTFT p50  TTFT p90  ITL p50  ITL p90  ITL p99    TPOT  cpu ms/tok  cores"
for conc in 1 8 16; do
  for round in 1 2; do
    bench llama-server http://127.0.0.1:18480 "$lpid" "" "$conc" "$round"
    bench nereid http://127.0.0.1:18484 "$npid" llamacpp- "$conc" "$round"
  done
done

"$PY" - "$out" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
def runs(label, conc):
    return [json.load(open(os.path.join(out, f"{label}-{conc}-{r}.json")))["levels"][0] for r in (1, 2)]
def cpu(label, conc):
    inside = outside = tokens = 0
    for r in (1, 2):
        i0, i1, o0, o1, n = map(float, open(os.path.join(out, f"{label}-{conc}-{r}.cpu")).read().split())
        inside, outside, tokens = inside + i1 - i0, outside + o1 - o0, tokens + n
    return 1e3 * inside / tokens, 1e3 * outside / tokens
print("\nconc | tok/s llama-server | tok/s nereid | ratio | TTFT p50 ms l-s / nereid | nereid CPU ms/token: engine / rest")
for conc in (1, 8, 16):
    a, b = runs("llama-server", conc), runs("nereid", conc)
    ta = sum(x["output_tokens"] for x in a) / sum(x["wall_s"] for x in a)
    tb = sum(x["output_tokens"] for x in b) / sum(x["wall_s"] for x in b)
    fa = statistics.median(x["ttft_ms"]["p50"] for x in a)
    fb = statistics.median(x["ttft_ms"]["p50"] for x in b)
    engine, rest = cpu("nereid", conc)
    print(f"{conc:>4} | {ta:>18.1f} | {tb:>12.1f} | {tb / ta:>5.2f} | {fa:>10.1f} / {fb:<10.1f} | {engine:.2f} / {rest:.3f}")
PY
echo "results: $out"
