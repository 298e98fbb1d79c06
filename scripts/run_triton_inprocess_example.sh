#!/usr/bin/env bash
# Compiles Triton's own in-process example (server repository src/simple.cc with its
# src/common.h; Triton's CMakeLists builds it from simple.cc alone), UNMODIFIED, against Triton's tritonserver.h and links it to
# Nereid's libtritonserver.so, then runs it on an ONNX `simple` model (INPUT0/INPUT1 INT32
# [16], OUTPUT0 = sum, OUTPUT1 = difference). Triton's files are copied to a temporary
# directory only; nothing of them enters this repository. Not part of CI.
#
# Usage: scripts/run_triton_inprocess_example.sh SERVER_MIRROR_OR_CHECKOUT CORE_MIRROR_OR_CHECKOUT
#   each argument is a bare git directory (read at HEAD) or a checked-out tree.
# Needs: g++, rapidjson (apt-get install -y rapidjson-dev), ./.venv with onnx and
# onnxruntime (scripts/setup.sh), and `cargo build --release -p nereid-triton-abi`.
set -euo pipefail

if [ $# -ne 2 ]; then
    sed -n '2,12p' "$0" >&2
    exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
server_src=$1
core_src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Writes file PATH of source SRC (bare git dir or checkout) to DEST.
extract() {
    local src=$1 path=$2 dest=$3
    mkdir -p "$(dirname "$dest")"
    if [ "$(git -C "$src" rev-parse --is-bare-repository 2>/dev/null)" = "true" ]; then
        git -C "$src" show "HEAD:$path" >"$dest"
    else
        cp "$src/$path" "$dest"
    fi
}

extract "$server_src" src/simple.cc "$work/src/simple.cc"
extract "$server_src" src/common.h "$work/src/common.h"
extract "$core_src" include/triton/core/tritonserver.h "$work/include/triton/core/tritonserver.h"

lib="$root/target/release"
if [ ! -f "$lib/libtritonserver.so" ]; then
    (cd "$root" && cargo build --release -p nereid-triton-abi)
fi

g++ -std=c++17 -O1 -Wall -Wextra -Wno-type-limits -Wno-unused-parameter \
    -Wno-deprecated-declarations -Werror -I"$work/include" -o "$work/simple" \
    "$work/src/simple.cc" \
    -L"$lib" -ltritonserver -Wl,-rpath,"$lib" -lpthread

# The `simple` model from Nereid's ONNX stand-ins for Triton's examples.
"$root/.venv/bin/python" "$root/scripts/make_triton_examples.py" "$work/examples" >/dev/null
mkdir -p "$work/repository"
cp -r "$work/examples/model_repository/simple" "$work/repository/"

# ONNX Runtime is found through ./.venv relative to the working directory.
cd "$root"
"$work/simple" -r "$work/repository"
echo "simple.cc finished with status $?"
