#!/usr/bin/env bash
# Prepares a fresh checkout: a project-local virtualenv (.venv) with ONNX Runtime, onnx
# and tritonclient, the example model repository, and a release build of nereid.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! .venv/bin/python -c "import onnxruntime, onnx, tritonclient.http, tritonclient.grpc, pytest" 2>/dev/null; then
  echo "setup: creating .venv and installing requirements.txt" >&2
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt
fi

echo "setup: generating example models" >&2
.venv/bin/python scripts/make_models.py examples/models

echo "setup: building nereid (release)" >&2
cargo build --release --locked -p nereid-server
