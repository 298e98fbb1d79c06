#!/usr/bin/env bash
# Server CPU time per request, this build against another nereid binary, side by side:
# add_sub at concurrency 4 over HTTP and gRPC, alternating the two binaries for three
# rounds (CPU time from /proc via ../shared/triton/cpu-per-request.sh, divided by the
# requests the server counted). Usage: scripts/cpu-vs-base.sh /path/to/base/nereid
# PROTOCOLS (default "http grpc") may also name "stream": gRPC ModelStreamInfer streams.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${1:?usage: scripts/cpu-vs-base.sh BASE_NEREID_BINARY}
BENCH=target/release/nereid-bench
CPU=../shared/triton/cpu-per-request.sh

run() { # label binary port proto
  local label=$1 bin=$2 port=$3 proto=$4
  "$bin" --model-repository examples/models --http-port "$port" --grpc-port $((port + 1)) \
    --metrics-port $((port + 2)) --model-control-mode explicit --load-model add_sub 2>/dev/null &
  local pid=$!
  for _ in $(seq 100); do curl -sf "127.0.0.1:$port/v2/health/ready" >/dev/null && break; sleep 0.1; done
  local url=127.0.0.1:$port args=(-i "$proto")
  [ "$proto" != http ] && url=127.0.0.1:$((port + 1))
  [ "$proto" = stream ] && args=(-i grpc --streaming)
  echo "$label $proto $("$CPU" "$pid" "$port" add_sub -- "$BENCH" -m add_sub -u "$url" "${args[@]}" \
    --concurrency-range 4 -p 1500 -r 3 --warmup-secs 0.5 --quiet)"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

for _ in 1 2 3; do
  for proto in ${PROTOCOLS:-http grpc}; do
    run new target/release/nereid 18000 "$proto"
    run base "$BASE" 19000 "$proto"
  done
done
