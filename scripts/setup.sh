#!/usr/bin/env bash
# Prepares a fresh checkout: a project-local virtualenv (.venv) with ONNX Runtime, onnx
# and tritonclient, the example model repository (with the SmolLM2 GGUF for the llama.cpp
# backend), and a release build of nereid.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! .venv/bin/python -c "import onnxruntime, onnx, tritonclient.http, tritonclient.grpc, pytest, kubernetes_validate, prometheus_client, moto, boto3, azure.storage.blob, gcp_storage_emulator, openai, requests, fastapi" 2>/dev/null; then
  # Debian's python3 lacks the venv module until python3-venv is installed.
  if ! python3 -m venv --help >/dev/null 2>&1; then
    echo "setup: installing python3-venv (needs root)" >&2
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
  fi
  echo "setup: creating .venv and installing requirements.txt" >&2
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt
fi

echo "setup: generating example models" >&2
.venv/bin/python scripts/make_models.py examples/models

echo "setup: fetching the example LLM (SmolLM2 GGUF)" >&2
scripts/fetch_llm.sh >/dev/null

# The llama.cpp backend compiles llama.cpp (cmake, a C++ compiler) and generates its
# bindings (libclang).
if ! command -v cmake >/dev/null || ! ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1; then
  echo "setup: installing cmake and libclang for llama.cpp (needs root)" >&2
  apt-get update -qq && apt-get install -y -qq cmake clang libclang-dev >/dev/null
fi

# scripts/test.sh sets NEREID_SETUP_BUILD=0: its `cargo test --profile suite` builds the
# binary it tests, and a second, LTO build here would double CI's compile time.
if [ "${NEREID_SETUP_BUILD:-1}" = 1 ]; then
  echo "setup: building nereid (release)" >&2
  cargo build --release --locked -p nereid-server
fi
