#!/usr/bin/env bash
# Helpers shared by scripts/bench.sh and scripts/bench_ensemble.sh (sourced, not run).
# Expects OUT, BENCH and WINDOW to be set by the caller.

start_nereid() { # repo [extra flags...] -> sets PID HTTP GRPC METRICS
  local log repo=$1
  shift
  log=$(mktemp)
  target/release/nereid --model-repository "$repo" --http-port 0 --grpc-port 0 --metrics-port 0 \
    --http-address 127.0.0.1 --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 "$@" 2>"$log" &
  PID=$!
  for _ in $(seq 200); do
    HTTP=$(sed -n 's/.*Started HTTPService at \([0-9.:]*\).*/\1/p' "$log")
    GRPC=$(sed -n 's/.*Started GRPCInferenceService at \([0-9.:]*\).*/\1/p' "$log")
    METRICS=$(sed -n 's/.*Started Metrics Service at \([0-9.:]*\).*/\1/p' "$log")
    [[ -n $HTTP && -n $GRPC && -n $METRICS ]] && return 0
    sleep 0.05
  done
  echo "nereid did not start:" >&2; cat "$log" >&2; exit 1
}

run_bench() { # name model url protocol range [extra...]
  local name=$1 model=$2 url=$3 protocol=$4 range=$5
  shift 5
  echo "bench: $name" >&2
  "$BENCH" -m "$model" -u "$url" -i "$protocol" --concurrency-range "$range" \
    -p "$WINDOW" --max-trials 6 --quiet --csv "$OUT/$name.csv" "$@" >/dev/null
}

