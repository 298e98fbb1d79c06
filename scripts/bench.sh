#!/usr/bin/env bash
# Regenerates the numbers in BENCHMARKS.md: builds nereid, nereid-bench and the in-process
# ONNX Runtime baseline, generates the benchmark models, runs every measurement on this
# machine and writes bench/results/*.csv plus BENCHMARKS.md (via scripts/bench_report.py).
#
#   scripts/bench.sh            # about 5 minutes on the 2-core machine
#   TRITON=1 scripts/bench.sh   # also put the real Triton 2.51 (../shared/triton) beside
#                               # nereid for the per-request overhead on add_sub
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --locked -p nereid-bench -p nereid-backend-onnx --example ort_inprocess

OUT=bench/results
MODELS=$(mktemp -d)/models
mkdir -p "$OUT"
.venv/bin/python scripts/make_bench_models.py "$MODELS" >/dev/null
BENCH=target/release/nereid-bench
WINDOW=${WINDOW:-1500}

# shellcheck source=scripts/bench_lib.sh
source scripts/bench_lib.sh

start_nereid "$MODELS"
for model in mlp mlp_large; do
  for c in 1 4 16 64; do
    run_bench "served_${model}_c$c" "$model" "$GRPC" grpc "$c:$c:1"
  done
done
for model in mlp mlp_large; do
  run_bench "batching_on_$model" "$model" "$GRPC" grpc 16:16:1
  run_bench "batching_off_$model" "${model}_nobatch" "$GRPC" grpc 16:16:1
done
run_bench overhead_nereid_http add_sub "$HTTP" http 1:1:1
run_bench overhead_nereid_grpc add_sub "$GRPC" grpc 1:1:1
kill "$PID"; wait "$PID" || true

scripts/bench_ensemble.sh "$MODELS"

# Shared memory vs the body: a 4 MiB and a 64 MiB FP32 identity at concurrency 1.
SHM_REPO=$(mktemp -d)
cp -r examples/models/identity_fp32 "$SHM_REPO/"
start_nereid "$SHM_REPO" --allow-client-shm=true
for size in 4 64; do
  elements=$((size * 262144))
  for transport in "http none" "http system" "grpc none" "grpc system"; do
    set -- $transport
    extra=()
    [[ $2 == system ]] && extra=(--output-shared-memory-size $((size * 1048576)))
    run_bench "shm_${size}mib_$1_$2" identity_fp32 "$([[ $1 == http ]] && echo "$HTTP" || echo "$GRPC")" "$1" 1:1:1 \
      --shape "INPUT0:$elements" --shared-memory "$2" "${extra[@]}"
  done
done
kill "$PID"; wait "$PID" || true
.venv/bin/python - >"$OUT/memcpy.csv" <<'PY'
import time

import numpy as np

print("mib,copies_per_sec")
for mib in (4, 64):
    a = np.ones(mib * 262144, np.float32)
    b = np.empty_like(a)
    for _ in range(3):
        np.copyto(b, a)
    n = max(5, 2048 // mib)
    start = time.perf_counter()
    for _ in range(n):
        np.copyto(b, a)
    print(f"{mib},{n / (time.perf_counter() - start):.1f}")
PY

# Response cache: the load generator repeats its inputs, so every request after the first
# is a hit. add_sub without the cache runs beside it on the same server.
CACHE_REPO=$(mktemp -d)
cp -r "$MODELS/add_sub" "$CACHE_REPO/add_sub"
cp -r "$MODELS/add_sub" "$CACHE_REPO/add_sub_cache"
sed -i 's/^name: "add_sub"/name: "add_sub_cache"/' "$CACHE_REPO/add_sub_cache/config.pbtxt"
echo 'response_cache { enable: true }' >>"$CACHE_REPO/add_sub_cache/config.pbtxt"
REDIS_PORT=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no >/dev/null &
REDIS_PID=$!
for cache in local redis; do
  if [[ $cache == local ]]; then
    start_nereid "$CACHE_REPO" --cache-config local,size=67108864
  else
    start_nereid "$CACHE_REPO" --cache-config redis,host=127.0.0.1 --cache-config "redis,port=$REDIS_PORT"
  fi
  for protocol in http grpc; do
    url=$([[ $protocol == http ]] && echo "$HTTP" || echo "$GRPC")
    for c in 1 8; do
      run_bench "cache_${cache}_${protocol}_c$c" add_sub_cache "$url" "$protocol" "$c:$c:1"
      [[ $cache == local ]] && run_bench "cache_off_${protocol}_c$c" add_sub "$url" "$protocol" "$c:$c:1"
    done
  done
  kill "$PID"; wait "$PID" || true
done
kill "$REDIS_PID"; wait "$REDIS_PID" || true

# Sequences: 64 and 512 concurrent sequences of 50 steps on sequence_accumulate, with the
# direct and the oldest strategy (two instances, batches of up to 32). Resident memory
# before and after the 512-sequence run gives a rough state cost per sequence.
SEQ_REPO=$(mktemp -d)
for strategy in direct oldest; do
  dir="$SEQ_REPO/seq_$strategy"
  cp -r examples/models/sequence_accumulate "$dir"
  sed -i -e "s/^name: .*/name: \"seq_$strategy\"/" -e 's/max_batch_size: 4/max_batch_size: 32/' \
    -e 's/count: 1/count: 2/' "$dir/config.pbtxt"
  if [[ $strategy == oldest ]]; then
    sed -i 's/^  max_sequence_idle_microseconds: .*/&\n  oldest { max_candidate_sequences: 256 preferred_batch_size: [ 32 ] max_queue_delay_microseconds: 1000 }/' \
      "$dir/config.pbtxt"
  fi
done
start_nereid "$SEQ_REPO"
echo "strategy,sequences,rss_before_kib,rss_after_kib" >"$OUT/sequence_memory.csv"
for strategy in direct oldest; do
  for c in 64 512; do
    before=$(awk '/VmRSS/ {print $2}' "/proc/$PID/status")
    run_bench "sequence_${strategy}_c$c" "seq_$strategy" "$GRPC" grpc "$c:$c:1" --sequence-length 50
    after=$(awk '/VmRSS/ {print $2}' "/proc/$PID/status")
    echo "$strategy,$c,$before,$after" >>"$OUT/sequence_memory.csv"
  done
done
kill "$PID"; wait "$PID" || true

# Stateful backend: accumulate_fp32 with 1,000 and 10,000 live sequences of 50 steps,
# with lazy (the example's 512/100/32/200) and eager state buffers. 6000 candidate
# sequences per instance (5400 after the 0.9 use ratio), two instances, END requests run.
# Each run gets a fresh server; state memory comes from its nv_stateful_* metrics.
STATEFUL_REPO=$(mktemp -d)
for mode in lazy eager; do
  dir="$STATEFUL_REPO/stateful_$mode"
  cp -r examples/models/accumulate_fp32 "$dir"
  sed -i -e "s/^name: .*/name: \"stateful_$mode\"/" \
    -e 's/max_candidate_sequences: 1280/max_candidate_sequences: 6000/' \
    -e '/"infer_end_requests"/s/"0"/"1"/' "$dir/config.pbtxt"
  [[ $mode == eager ]] && sed -i '/_buffer_size\|buffer_alloc_threshold\|buffer_dealloc_threshold/d' "$dir/config.pbtxt"
done
gauge() { # name model
  curl -s "http://$METRICS/metrics" | sed -n "s/^$1{model=\"$2\".*} //p"
}
echo "mode,sequences,buffers_at_load,bytes_at_load,buffers_after,bytes_after,rss_before_kib,rss_after_kib" \
  >"$OUT/stateful_memory.csv"
for mode in lazy eager; do
  for c in 1000 10000; do
    start_nereid "$STATEFUL_REPO"
    model="stateful_$mode"
    buffers_load=$(gauge nv_stateful_state_buffers "$model")
    bytes_load=$(gauge nv_stateful_state_bytes "$model")
    before=$(awk '/VmRSS/ {print $2}' "/proc/$PID/status")
    run_bench "stateful_${mode}_c$c" "$model" "$GRPC" grpc "$c:$c:1" --sequence-length 50 \
      --shape Input:4,1,5
    after=$(awk '/VmRSS/ {print $2}' "/proc/$PID/status")
    echo "$mode,$c,$buffers_load,$bytes_load,$(gauge nv_stateful_state_buffers "$model"),$(gauge nv_stateful_state_bytes "$model"),$before,$after" \
      >>"$OUT/stateful_memory.csv"
    kill "$PID"; wait "$PID" || true
  done
done

echo "bench: in-process ONNX Runtime" >&2
BATCHES=1,2,3,4,5,6,7,8,10,12,14,16,20,24,32,48,64
target/release/examples/ort_inprocess "$MODELS/mlp/1/model.onnx" INPUT 16 "$BATCHES" 2 1 >"$OUT/inprocess_mlp.csv"
target/release/examples/ort_inprocess "$MODELS/mlp_large/1/model.onnx" INPUT 256 "$BATCHES" 2 1 >"$OUT/inprocess_mlp_large.csv"

if [[ ${TRITON:-0} == 1 ]]; then
  echo "bench: Triton 2.51 (python backend add_sub)" >&2
  TPID=$(../shared/triton/triton-anchor.sh start --model-repository ../shared/triton/models \
    --http-port 28000 --grpc-port 28001 --metrics-port 28002 --cache-size 0)
  run_bench overhead_triton_http add_sub 127.0.0.1:28000 http 1:1:1
  run_bench overhead_triton_grpc add_sub 127.0.0.1:28001 grpc 1:1:1
  ../shared/triton/triton-anchor.sh stop "$TPID" >/dev/null
  echo "bench: Triton 2.51 (local response cache)" >&2
  TPID=$(../shared/triton/triton-anchor.sh start --model-repository ../shared/triton/models \
    --http-port 28000 --grpc-port 28001 --metrics-port 28002 --cache-size 67108864)
  for c in 1 8; do
    run_bench "cache_triton_http_c$c" add_sub_cache 127.0.0.1:28000 http "$c:$c:1"
    run_bench "cache_triton_grpc_c$c" add_sub_cache 127.0.0.1:28001 grpc "$c:$c:1"
  done
  ../shared/triton/triton-anchor.sh stop "$TPID" >/dev/null
fi

echo "bench: start-up" >&2
EMPTY=$(mktemp -d)
: >"$OUT/startup.csv"
echo "repository,run,ms_to_ready,rss_kib" >>"$OUT/startup.csv"
for repo in examples/models "$EMPTY"; do
  label=$([[ $repo == "$EMPTY" ]] && echo empty || echo examples)
  for run in 1 2 3 4 5; do
    # The child opens its log asynchronously: create it first so the poll below can read it.
    : >"$OUT/.startup.log"
    t0=$(date +%s%N)
    target/release/nereid --model-repository "$repo" --http-port 0 --grpc-port 0 --metrics-port 0 \
      --http-address 127.0.0.1 --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 2>"$OUT/.startup.log" &
    pid=$!
    port=""
    until [[ -n $port ]] && curl -sf "http://$port/v2/health/ready" >/dev/null 2>&1; do
      port=$(sed -n 's/.*Started HTTPService at \([0-9.:]*\).*/\1/p' "$OUT/.startup.log")
      sleep 0.002
    done
    t1=$(date +%s%N)
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
    echo "$label,$run,$(((t1 - t0) / 1000000)),$rss" >>"$OUT/startup.csv"
    kill "$pid"; wait "$pid" || true
  done
done
rm -f "$OUT/.startup.log"

.venv/bin/python scripts/bench_report.py "$OUT" > BENCHMARKS.md
echo "bench: wrote BENCHMARKS.md" >&2
