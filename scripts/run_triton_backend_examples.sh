#!/usr/bin/env bash
# Runs Triton's backend example clients, unchanged, against a Nereid binary serving the
# examples' model repositories with the backends scripts/build_triton_backends.sh built
# from Triton's source (issue 39), and prints a pass/fail table.
#
# Usage: scripts/run_triton_backend_examples.sh SRC_DIR BACKENDS_DIR NEREID_BIN
#
#   SRC_DIR       as for build_triton_backends.sh (SRC_DIR/backend holds the examples)
#   BACKENDS_DIR  its OUT_DIR (the --backend-directory)
#   NEREID_BIN    the server binary
#
# Environment: PYTHON (default <repo>/.venv/bin/python, with tritonclient[all]), PORT
# (HTTP, default 18000; gRPC and metrics take the next two). Exit status: failures.
set -u

usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2; exit 2; }
[ $# -eq 3 ] || usage
ROOT=$(cd "$(dirname "$0")/.." && pwd)
EXAMPLES=$(cd "$1/backend/examples" && pwd) || exit 2
BACKENDS=$(cd "$2" && pwd) || exit 2
NEREID=$3
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
PORT=${PORT:-18000}
if [ -z "${ORT_DYLIB_PATH:-}" ]; then
  for lib in "$ROOT"/.venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.1*; do
    [ -f "$lib" ] && export ORT_DYLIB_PATH=$lib
  done
fi

failed=0
# example: client -> model repository
for example in minimal recommended; do
  log=$(mktemp)
  "$NEREID" --model-repository "$EXAMPLES/model_repos/${example}_models" \
    --backend-directory "$BACKENDS" --http-port "$PORT" --grpc-port $((PORT + 1)) \
    --metrics-port $((PORT + 2)) >"$log" 2>&1 &
  server=$!
  for _ in $(seq 1 100); do
    "$PYTHON" -c "import urllib.request as u; u.urlopen('http://localhost:$PORT/v2/health/ready', timeout=1)" \
      2>/dev/null && break
    sleep 0.1
  done
  if timeout 120 "$PYTHON" "$EXAMPLES/clients/${example}_client" -u "localhost:$PORT" >>"$log" 2>&1; then
    printf '%-22s PASS\n' "${example}_client"
  else
    printf '%-22s FAIL (server and client output: %s)\n' "${example}_client" "$log"
    failed=$((failed + 1))
  fi
  kill "$server" 2>/dev/null
  wait "$server" 2>/dev/null
done
exit $failed
