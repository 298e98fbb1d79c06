#!/usr/bin/env bash
# Run Triton's own Python client examples, unmodified, against a Nereid binary
# and print a pass/fail table.
#
# Usage: scripts/run_triton_examples.sh [-p HTTP_PORT] [-g GRPC_PORT]
#            [-m METRICS_PORT] [-k] EXAMPLES_DIR NEREID_BIN
#
#   EXAMPLES_DIR  a copy of the client repository's src/python/examples (the
#                 examples are not kept in this repository)
#   NEREID_BIN    the server binary to test
#   -p/-g/-m      ports (default 8000/8001/8002, the examples' defaults); other
#                 ports are passed to the examples with -u, except
#                 memory_growth_test.py, which has no -u and is skipped then
#   -k            keep the work directory (models, logs) and print its path
#
# Environment: PYTHON (default: <repo>/.venv/bin/python, which needs
# tritonclient[all] and numpy; image_client.py and grpc_image_client.py also need
# Pillow, and are skipped without it), EXAMPLE_TIMEOUT (seconds per example,
# default 120).
#
# Models come from scripts/make_triton_examples.py. The examples run against
# one server with all of its repositories; each model-control example against a
# server of its own in explicit mode with the repositories whose models it
# counts (HTTP: seven, gRPC: eight, as in Triton's L0_http / L0_grpc). The server
# runs in the repository root, where it finds ONNX Runtime in ./.venv unless
# ORT_DYLIB_PATH says otherwise. Skipped: the CUDA shared-memory examples (no GPU), and the examples
# whose models have no ONNX equivalent (simple_grpc_custom_repeat.py, a
# decoupled model; ensemble_image_client.py, DALI preprocessing).
# A pass is exit status 0 and, for an example that prints "PASS" on success,
# that word in its output. Exit status: 0 when every example run passed.

set -u

usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2; exit 2; }

HTTP_PORT=8000
GRPC_PORT=8001
METRICS_PORT=8002
KEEP=0
while getopts "p:g:m:kh" opt; do
  case "$opt" in
    p) HTTP_PORT=$OPTARG ;;
    g) GRPC_PORT=$OPTARG ;;
    m) METRICS_PORT=$OPTARG ;;
    k) KEEP=1 ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || usage
EXAMPLES=$(cd "$1" && pwd) || exit 2
NEREID=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
[ -x "$NEREID" ] || { echo "not executable: $NEREID" >&2; exit 2; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
TIMEOUT=${EXAMPLE_TIMEOUT:-120}
HTTP_URL=localhost:$HTTP_PORT
GRPC_URL=localhost:$GRPC_PORT

WORK=$(mktemp -d "${TMPDIR:-/tmp}/triton-examples.XXXXXX")
mkdir -p "$WORK/logs"
SERVER_PID=

cleanup() {
  stop_server
  if [ "$KEEP" = 1 ]; then echo "work directory: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for port in "$HTTP_PORT" "$GRPC_PORT" "$METRICS_PORT"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is already in use; pick others with -p/-g/-m" >&2
    exit 2
  fi
done

"$PYTHON" "$ROOT/scripts/make_triton_examples.py" "$WORK/models" >/dev/null || exit 1

# start_server LOG ARGS...: start Nereid and wait until it answers ready.
start_server() {
  local log=$1
  shift
  (cd "$ROOT" && exec "$NEREID" --http-port "$HTTP_PORT" --grpc-port "$GRPC_PORT" \
    --metrics-port "$METRICS_PORT" "$@") >"$log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 100); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "nereid exited at start-up; see $log:" >&2
      tail -20 "$log" >&2
      SERVER_PID=
      return 1
    fi
    if "$PYTHON" - "$HTTP_URL" <<'EOF' 2>/dev/null; then return 0; fi
import sys, urllib.request
urllib.request.urlopen(f"http://{sys.argv[1]}/v2/health/ready", timeout=1)
EOF
    sleep 0.3
  done
  echo "nereid did not become ready; see $log" >&2
  return 1
}

stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
    SERVER_PID=
  fi
}

# reason LOG: the most telling line of a failed example's output: a gRPC status
# detail, an exception or a FAILED/expected line, else the last line.
reason() {
  local line
  line=$(grep -E 'details = |Exception|Error|FAILED|expected|error' "$1" | tail -1)
  [ -n "$line" ] || line=$(grep -v '^\s*$' "$1" | tail -1)
  [ -n "$line" ] || line="(no output)"
  echo "$line" | sed 's/^[[:space:]]*//' | cut -c1-160
}

RESULTS=()
FAILED=0

record() { RESULTS+=("$(printf '%-58s %s' "$1" "$2")"); }

# run LABEL SCRIPT ARGS...: run one example from EXAMPLES_DIR and record it.
run() {
  local label=$1 script=$2
  shift 2
  local log="$WORK/logs/${label//[^A-Za-z0-9_.-]/_}.log"
  (cd "$WORK" && timeout "$TIMEOUT" "$PYTHON" "$EXAMPLES/$script" "$@") >"$log" 2>&1
  local rc=$?
  local verdict=PASS
  if [ $rc -ne 0 ]; then
    verdict="FAIL (exit $rc): $(reason "$log")"
  elif grep -q 'PASS' "$EXAMPLES/$script" && ! grep -q 'PASS' "$log"; then
    verdict="FAIL (no PASS printed): $(reason "$log")"
  fi
  [ "$verdict" = PASS ] || FAILED=$((FAILED + 1))
  record "$label" "$verdict"
}

skip() { record "$1" "SKIP: $2"; }

# An image for the image clients (and a check that Pillow is there).
IMAGE=$WORK/mug.jpg
HAVE_PIL=0
if "$PYTHON" - "$IMAGE" <<'EOF' 2>/dev/null; then HAVE_PIL=1; fi
import sys
from PIL import Image
img = Image.new("RGB", (320, 240))
img.putdata([((x * 3) % 256, (y * 5) % 256, 128) for y in range(240) for x in range(320)])
img.save(sys.argv[1], quality=90)
EOF

M=$WORK/models
# The shared-memory examples need client shared memory, off by default.
if start_server "$WORK/server.log" --allow-client-shm=true --model-repository "$M/model_repository" \
    --model-repository "$M/sequence_extra" --model-repository "$M/identity_extra"; then
  H=(-u "$HTTP_URL")
  G=(-u "$GRPC_URL")
  run simple_http_health_metadata.py simple_http_health_metadata.py "${H[@]}"
  run simple_grpc_health_metadata.py simple_grpc_health_metadata.py "${G[@]}"
  run simple_http_infer_client.py simple_http_infer_client.py "${H[@]}"
  run simple_grpc_infer_client.py simple_grpc_infer_client.py "${G[@]}"
  for algo in gzip deflate; do
    run "simple_http_infer_client.py (compression $algo)" simple_http_infer_client.py \
      "${H[@]}" --request-compression-algorithm $algo --response-compression-algorithm $algo
    run "simple_grpc_infer_client.py -C $algo" simple_grpc_infer_client.py "${G[@]}" -C $algo
    run "simple_grpc_aio_infer_client.py -C $algo" simple_grpc_aio_infer_client.py \
      "${G[@]}" -C $algo
  done
  run "simple_http_infer_client.py -H test:1" simple_http_infer_client.py "${H[@]}" -H test:1
  run "simple_grpc_infer_client.py -t 10" simple_grpc_infer_client.py "${G[@]}" -t 10
  run simple_http_async_infer_client.py simple_http_async_infer_client.py "${H[@]}"
  run simple_grpc_async_infer_client.py simple_grpc_async_infer_client.py "${G[@]}"
  run simple_http_aio_infer_client.py simple_http_aio_infer_client.py "${H[@]}"
  run simple_grpc_aio_infer_client.py simple_grpc_aio_infer_client.py "${G[@]}"
  run simple_grpc_custom_args_client.py simple_grpc_custom_args_client.py "${G[@]}"
  run simple_grpc_keepalive_client.py simple_grpc_keepalive_client.py "${G[@]}"
  run "reuse_infer_objects_client.py -i http" reuse_infer_objects_client.py -i http "${H[@]}"
  run "reuse_infer_objects_client.py -i grpc" reuse_infer_objects_client.py -i grpc "${G[@]}"
  run simple_http_string_infer_client.py simple_http_string_infer_client.py "${H[@]}"
  run simple_grpc_string_infer_client.py simple_grpc_string_infer_client.py "${G[@]}"
  run simple_http_shm_client.py simple_http_shm_client.py "${H[@]}"
  run simple_grpc_shm_client.py simple_grpc_shm_client.py "${G[@]}"
  run simple_http_shm_string_client.py simple_http_shm_string_client.py "${H[@]}"
  run simple_grpc_shm_string_client.py simple_grpc_shm_string_client.py "${G[@]}"
  run grpc_explicit_int_content_client.py grpc_explicit_int_content_client.py "${G[@]}"
  run grpc_explicit_int8_content_client.py grpc_explicit_int8_content_client.py "${G[@]}"
  run grpc_explicit_byte_content_client.py grpc_explicit_byte_content_client.py "${G[@]}"
  # Sequence examples: the default mode, then -d (simple_dyna_sequence and
  # simple_string_dyna_sequence); -o gives every run its own sequence ids.
  offset=0
  for mode in "" -d; do
    run "simple_http_sequence_sync_infer_client.py $mode" \
      simple_http_sequence_sync_infer_client.py "${H[@]}" $mode -o $((offset += 10))
    run "simple_grpc_sequence_sync_infer_client.py $mode" \
      simple_grpc_sequence_sync_infer_client.py "${G[@]}" $mode -o $((offset += 10))
    run "simple_grpc_sequence_stream_infer_client.py $mode" \
      simple_grpc_sequence_stream_infer_client.py "${G[@]}" $mode -o $((offset += 10))
    run "simple_grpc_aio_sequence_stream_infer_client.py $mode" \
      simple_grpc_aio_sequence_stream_infer_client.py "${G[@]}" $mode -o $((offset += 10))
  done
  run grpc_client.py grpc_client.py "${G[@]}"
  if [ "$HAVE_PIL" = 1 ]; then
    for a in "" -a; do
      run "image_client.py -i http $a" image_client.py -m densenet_onnx -s INCEPTION \
        -c 1 $a -i http "${H[@]}" "$IMAGE"
      run "image_client.py -i grpc $a" image_client.py -m densenet_onnx -s INCEPTION \
        -c 1 $a -i grpc "${G[@]}" "$IMAGE"
      run "grpc_image_client.py $a" grpc_image_client.py -m densenet_onnx -s INCEPTION \
        -c 1 $a "${G[@]}" "$IMAGE"
    done
    run "image_client.py -i grpc --streaming" image_client.py -m densenet_onnx \
      -s INCEPTION -c 1 --streaming -i grpc "${G[@]}" "$IMAGE"
  else
    skip "image_client.py, grpc_image_client.py" "Pillow is not installed for $PYTHON"
  fi
  if [ "$HTTP_PORT" = 8000 ] && [ "$GRPC_PORT" = 8001 ]; then
    run "memory_growth_test.py -i http" memory_growth_test.py -i http -r 20
    run "memory_growth_test.py -i grpc" memory_growth_test.py -i grpc -r 20
  else
    skip memory_growth_test.py "its ports are fixed at 8000/8001"
  fi
  stop_server
else
  FAILED=$((FAILED + 1))
  record "(server with all repositories)" "FAIL: did not start; see $WORK/server.log"
fi

# model_control LABEL URL REPOSITORY...: one model-control example on a fresh
# explicit-mode server.
model_control() {
  local script=$1 url=$2
  shift 2
  local repos=()
  for r in "$@"; do repos+=(--model-repository "$M/$r"); done
  if start_server "$WORK/server-${script%.py}.log" --model-control-mode explicit "${repos[@]}"; then
    run "$script" "$script" -u "$url"
    stop_server
  else
    FAILED=$((FAILED + 1))
    record "$script" "FAIL: server did not start; see $WORK/server-${script%.py}.log"
  fi
}
model_control simple_http_model_control.py "$HTTP_URL" model_repository
model_control simple_grpc_model_control.py "$GRPC_URL" model_repository sequence_extra

skip "simple_http_cudashm_client.py, simple_grpc_cudashm_client.py" "CUDA shared memory"
skip simple_grpc_custom_repeat.py "repeat_int32 is a decoupled custom backend"
skip ensemble_image_client.py "preprocess_inception_ensemble needs DALI"

echo
printf '%s\n' "${RESULTS[@]}"
echo
echo "$FAILED failed"
[ "$FAILED" -eq 0 ]
