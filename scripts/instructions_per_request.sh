#!/usr/bin/env bash
# User-space instructions per HTTP infer request, counted by valgrind's callgrind: the
# steady figure beside server CPU time, which this shared machine makes noisy. Serves
# add_sub (a response-cache hit with --cache-hit, else the model runs) from a copy of
# examples/models, sends 300 warm-up requests, zeroes the counters, sends N sequential
# keep-alive JSON requests from python's http.client, and prints the instructions of all
# the server's threads divided by N. The profile stays in OUT for callgrind_annotate.
#   scripts/instructions_per_request.sh BIN OUT [N] [--cache-hit]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "$1"); out=$(realpath -m "$2"); n=${3:-2000}; model=add_sub
[[ "${4:-}" == --cache-hit ]] && model=add_sub_cache
command -v valgrind >/dev/null || apt-get install -y -q valgrind >/dev/null
mkdir -p "$out"
repo=$(mktemp -d)
trap 'rm -rf "$repo"' EXIT
cp -r examples/models/add_sub "$repo/add_sub"
cp -r examples/models/add_sub "$repo/add_sub_cache"
sed -i 's/name: "add_sub"/name: "add_sub_cache"/' "$repo/add_sub_cache/config.pbtxt"
echo 'response_cache { enable: true }' >>"$repo/add_sub_cache/config.pbtxt"
port=$((20000 + RANDOM % 20000))
valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out" -q "$bin" \
  --model-repository "$repo" --http-port "$port" --grpc-port $((port + 1)) \
  --metrics-port $((port + 2)) --cache-config local,size=1048576 >"$out/server.log" 2>&1 &
pid=$!
for _ in $(seq 600); do curl -sf "localhost:$port/v2/health/ready" >/dev/null && break; sleep 0.5; done
send() {
  .venv/bin/python - "$port" "$model" "$1" <<'PY'
import http.client, sys
port, model, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
body = (b'{"inputs":[{"name":"INPUT0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]},'
        b'{"name":"INPUT1","shape":[1,4],"datatype":"FP32","data":[1,1,1,1]}]}')
connection = http.client.HTTPConnection("127.0.0.1", port)
for _ in range(n):
    connection.request("POST", f"/v2/models/{model}/infer", body, {"Content-Type": "application/json"})
    answer = connection.getresponse()
    answer.read()
    assert answer.status == 200, answer.status
PY
}
send 300
callgrind_control -z "$pid" >/dev/null 2>&1
send "$n"
callgrind_control -d "$pid" >/dev/null 2>&1
sleep 1
kill "$pid"
wait "$pid" 2>/dev/null || true
total=$(grep -h '^summary:' "$out"/callgrind.out.1 | awk '{print $2}')
echo "$(basename "$bin") $model: $((total / n)) instructions per request ($n requests; profile $out/callgrind.out.1)"
