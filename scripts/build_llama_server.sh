#!/usr/bin/env bash
# build_llama_server.sh: build llama.cpp's own `llama-server`, the anchor of the LLM section of
# BENCHMARKS.md (Nereid's llama.cpp backend is measured against it on the same GGUF, the same
# threads and the same ggml build settings), and the producer of tests/llamacpp/golden.json.
#
# Which llama.cpp. Nereid links llama.cpp through the crate llama-cpp-sys-2 0.1.161 (pulled in
# by llama-cpp-2 0.1.160). That crate vendors a llama.cpp tree (0.6.0-dev, ggml 0.26.0, newer
# than b11171: it has llama_batch_ext) but strips tools/server from it, and no llama.cpp mirror
# reachable here holds that commit: the ggml-org/llama.cpp snapshot is over the mirror size
# limit, and the newest fork snapshot that carries upstream master (ngxson/llama.cpp) stops at
#     3f545beccee69d9975f466ec7e45fd9aacd8ba90  (master, 2026-08-22, just after tag b10573)
# None of its commits has the crate's include/llama.h, src/llama-context.cpp or
# ggml/src/ggml-cpu/ggml-cpu.c blobs (237 of the 427 vendored include/src/common/ggml-core
# files differ from it), so there is no exact match. This script therefore builds:
#     tools/server, common/, tools/mtmd, vendor/, cmake and the top-level CMakeLists
#         from 3f545bec (the closest upstream commit that has a server), taken with git archive;
#     include/, src/ and ggml/ (libllama and ggml: every kernel, the graph, the KV cache)
#         copied from the crate's own vendored tree, so the inference engine is byte-for-byte
#         the one Nereid runs.
# The only API difference across that seam is llama_sampler_chain_n() returning int32_t instead
# of int, which compiles unchanged. Set LLAMA_SERVER_OVERLAY=0 to build plain 3f545bec instead.
#
# ggml settings are exactly those of Nereid's build (.cargo/config.toml plus what
# llama-cpp-sys-2's build.rs sets): GGML_NATIVE=OFF with AVX/AVX2/FMA/F16C/BMI2/SSE4.2 (x86-64-v3),
# OpenMP, static libraries, Release.
#
# Idempotent: does nothing when the binary exists (FORCE=1 rebuilds). Needs cmake, a C++17
# compiler, a bare llama.cpp mirror holding the commit (LLAMA_CPP_MIRROR, else one found under
# /work/.mirror), and, for the overlay, the crate sources in ~/.cargo/registry (`cargo fetch`).
# Output: $PREFIX/bin/llama-server, with $PREFIX/bin/PROVENANCE saying what went into it.
set -euo pipefail

LLAMA_CPP_COMMIT=3f545beccee69d9975f466ec7e45fd9aacd8ba90
CRATE=llama-cpp-sys-2-0.1.161
PREFIX=${LLAMA_SERVER_PREFIX:-/var/cache/nereid/llama-server}
BIN=$PREFIX/bin/llama-server
OVERLAY=${LLAMA_SERVER_OVERLAY:-1}
JOBS=${JOBS:-$(nproc)}

if [[ -x $BIN && ${FORCE:-0} != 1 ]]; then
    echo "build_llama_server.sh: $BIN already built ($(head -n1 "$PREFIX/bin/PROVENANCE" 2>/dev/null || echo 'no provenance')); FORCE=1 rebuilds"
    exit 0
fi

if ! command -v cmake >/dev/null 2>&1; then
    echo "build_llama_server.sh: cmake is not installed (apt-get install cmake g++ make), cannot build llama-server" >&2
    exit 1
fi

mirror=""
for cand in ${LLAMA_CPP_MIRROR:-} /work/.mirror/ggml-org+llama.cpp/repo /work/.mirror/*llama.cpp*/repo; do
    if [[ -n $cand && -d $cand ]] && git --git-dir="$cand" cat-file -e "$LLAMA_CPP_COMMIT^{commit}" 2>/dev/null; then
        mirror=$cand
        break
    fi
done
if [[ -z $mirror ]]; then
    echo "build_llama_server.sh: no llama.cpp git mirror holding commit $LLAMA_CPP_COMMIT (set LLAMA_CPP_MIRROR=<bare git dir>), cannot build llama-server" >&2
    exit 1
fi

vendored=""
if [[ $OVERLAY == 1 ]]; then
    vendored=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$CRATE"/llama.cpp 2>/dev/null | head -n1 || true)
    if [[ -z $vendored || ! -f $vendored/include/llama.h ]]; then
        echo "build_llama_server.sh: the sources of crate $CRATE are not in the cargo registry (run cargo fetch, or LLAMA_SERVER_OVERLAY=0), cannot build llama-server" >&2
        exit 1
    fi
fi

work=$PREFIX/work
src=$work/src
build=$work/build
rm -rf "$work"
mkdir -p "$src" "$PREFIX/bin"

# A mirror snapshot may lack large blobs (the vocab GGUFs under models/, used only by tests):
# leave out whatever it does not hold.
excludes=()
while read -r path; do
    excludes+=(":(exclude,literal)$path")
done < <(git --git-dir="$mirror" ls-tree -r "$LLAMA_CPP_COMMIT" \
    | awk '$2 == "blob" { print $3 " " $4 }' \
    | git --git-dir="$mirror" cat-file --batch-check='%(objectname) %(objecttype)' --buffer 2>/dev/null \
    | awk '$2 == "missing" { print $1 }' \
    | { grep -F -f - <(git --git-dir="$mirror" ls-tree -r "$LLAMA_CPP_COMMIT") || true; } \
    | cut -f2-)
git --git-dir="$mirror" archive --format=tar "$LLAMA_CPP_COMMIT" -- . "${excludes[@]}" | tar -x -C "$src"
if [[ $OVERLAY == 1 ]]; then
    for d in include src ggml; do
        rm -rf "${src:?}/$d"
        cp -a "$vendored/$d" "$src/$d"
    done
fi

start=$(date +%s)
cmake -S "$src" -B "$build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
    -DGGML_BMI2=ON -DGGML_SSE42=ON -DGGML_OPENMP=ON \
    -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_NUMBER=0 -DLLAMA_BUILD_COMMIT="${LLAMA_CPP_COMMIT:0:10}"
nice -n 10 cmake --build "$build" --target llama-server -j "$JOBS"
secs=$(( $(date +%s) - start ))

{
    if [[ $OVERLAY == 1 ]]; then
        echo "llama.cpp $LLAMA_CPP_COMMIT (tools/server, common, mtmd) + include/src/ggml of crate $CRATE"
        echo "vendored include/llama.h blob: $(git hash-object "$vendored/include/llama.h")"
    else
        echo "llama.cpp $LLAMA_CPP_COMMIT (plain)"
    fi
    echo "mirror: $mirror"
    echo "cmake: Release GGML_NATIVE=OFF AVX AVX2 FMA F16C BMI2 SSE42 OPENMP, static"
    echo "built: $(date -u +%FT%TZ) in ${secs}s with -j$JOBS"
} > "$PREFIX/bin/PROVENANCE.tmp"
install -m 0755 "$build/bin/llama-server" "$BIN.tmp"
mv "$PREFIX/bin/PROVENANCE.tmp" "$PREFIX/bin/PROVENANCE"
mv "$BIN.tmp" "$BIN"
echo "build_llama_server.sh: built $BIN in ${secs}s"
