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
# (HTTP, default 18000; gRPC and metrics take the next two), and for bls_client
# TRITON_PYTHON_BACKEND / TRITON_PYTHON_STUB_PATH as for scripts/run_triton_qa.sh. Exit
# status: failures.
#
# bls_client's repository holds `addsub_tf`, a TensorFlow SavedModel, which neither
# Nereid nor a CPU build of Triton without the TensorFlow backend can serve: it is
# replaced by an ONNX model of the same inputs, outputs and arithmetic. The client, the
# `bls` backend, `bls_fp32` and `addsub_python` are Triton's, unchanged (the client's
# `tritonhttpclient` import is tritonclient's deprecated alias, still shipped).
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

# The bls example's repository and backends, as the header describes; prints the
# folder holding models/ and backends/ (nothing when the python backend is not given).
bls_setup() {
  [ -n "${TRITON_PYTHON_BACKEND:-}" ] || return 0
  local dir
  dir=$(mktemp -d)
  cp -r "$EXAMPLES/model_repos/bls_models" "$dir/models"
  # The version folder the example's instructions make (git keeps no empty folder).
  mkdir -p "$dir/models/bls_fp32/1"
  rm -rf "$dir/models/addsub_tf/1" && mkdir -p "$dir/models/addsub_tf/1"
  sed -i 's/platform: "tensorflow_savedmodel"/platform: "onnxruntime_onnx"/' "$dir/models/addsub_tf/config.pbtxt"
  "$PYTHON" - "$dir/models/addsub_tf/1/model.onnx" <<'EOF' || return 1
import sys
from onnx import TensorProto, helper, save
io = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [16])
graph = helper.make_graph(
    [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
     helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])],
    "addsub_tf", [io("INPUT0"), io("INPUT1")], [io("OUTPUT0"), io("OUTPUT1")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
save(model, sys.argv[1])
EOF
  mkdir -p "$dir/backends"
  for backend in "$BACKENDS"/*/; do ln -s "$backend" "$dir/backends/$(basename "$backend")"; done
  ln -s "$(cd "$TRITON_PYTHON_BACKEND" && pwd)" "$dir/backends/python"
  echo "$dir"
}

failed=0
bls=$(bls_setup) || exit 2
examples=(minimal recommended)
[ -n "$bls" ] && examples+=(bls)
# example: client -> model repository
for example in "${examples[@]}"; do
  log=$(mktemp)
  repo=$EXAMPLES/model_repos/${example}_models backends=$BACKENDS
  if [ "$example" = bls ]; then
    repo=$bls/models backends=$bls/backends
  fi
  # The python backend's stubs take the first python3 on PATH.
  PATH="${TRITON_PYTHON_STUB_PATH:+$TRITON_PYTHON_STUB_PATH:}$PATH" \
    "$NEREID" --model-repository "$repo" \
    --backend-directory "$backends" --http-port "$PORT" --grpc-port $((PORT + 1)) \
    --metrics-port $((PORT + 2)) >"$log" 2>&1 &
  server=$!
  for _ in $(seq 1 300); do
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
