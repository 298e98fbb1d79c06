#!/usr/bin/env bash
# TorchScript models through Triton's pytorch backend hosted by the nereid binary: builds
# the backend (scripts/build_pytorch_backend.sh, cached), compiles the TorchScript model
# writer (tests/pytorch/make_torchscript_models.cc) against the same libtorch, writes the
# models and runs tests/pytorch with tritonclient.
#   scripts/test_pytorch_backend.sh [pytest args]
# NEREID_BIN: the binary (default target/release/nereid). Cache: /var/cache/nereid.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${NEREID_CACHE:-/var/cache/nereid}
BACKENDS=$CACHE/backends
scripts/build_pytorch_backend.sh "$BACKENDS"
LIBTORCH=$CACHE/torch/libtorch-2.5.1
MODELS=$CACHE/torchscript-models
writer=$MODELS/make_torchscript_models
if [ ! -x "$writer" ] || [ tests/pytorch/make_torchscript_models.cc -nt "$writer" ]; then
  echo "test_pytorch_backend: compiling the TorchScript model writer" >&2
  mkdir -p "$MODELS"
  c++ -std=c++17 -O1 -D_GLIBCXX_USE_CXX11_ABI=0 -I"$LIBTORCH/wheel/torch/include" \
    -I"$LIBTORCH/wheel/torch/include/torch/csrc/api/include" tests/pytorch/make_torchscript_models.cc \
    -L"$LIBTORCH/cpu" -ltorch_cpu -lc10 -Wl,-rpath,"$LIBTORCH/cpu" -Wl,-rpath-link,"$LIBTORCH/cpu" \
    -o "$writer"
fi
"$writer" "$MODELS" >/dev/null
NEREID_PYTORCH_BACKENDS=$BACKENDS NEREID_TORCHSCRIPT_MODELS=$MODELS \
  NEREID_BIN=${NEREID_BIN:-$PWD/target/release/nereid} .venv/bin/python -m pytest -q tests/pytorch "$@"
