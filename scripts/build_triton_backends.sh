#!/usr/bin/env bash
# Builds Triton's own C++ backends from their source with their own CMake files, for
# Nereid's --backend-directory (issue 39). Nothing here links Triton's server: the
# backends' dependency on libtritonserver.so is satisfied by Nereid at load time.
#
# Usage: scripts/build_triton_backends.sh SRC_DIR OUT_DIR [NAME...]
#
#   SRC_DIR  each repository checked out under its own name, at one release branch
#            (r24.10 is Triton 2.51, the version Nereid matches):
#            SRC_DIR/backend, core, common, identity_backend, repeat_backend, square_backend,
#            server (clones of github.com/triton-inference-server/<name>; of server only
#            src/test is read). CMake's FetchContent steps are pointed at these folders,
#            so the build needs no network.
#   OUT_DIR  receives OUT_DIR/<name>/libtriton_<name>.so, the layout --backend-directory
#            expects, and OUT_DIR/logs/<name>.log
#   NAME     which to build (default: all): minimal recommended bls identity repeat square,
#            and the server's QA test backends (server/src/test/...): sequence
#            dyna_sequence implicit_state iterative_sequence query distributed_addsub,
#            and the custom batching libraries backend/examples/batching_strategies/*:
#            volumebatching singlebatching (OUT_DIR/<name>/libtriton_<name>.so, for a
#            model's TRITON_BATCH_STRATEGY_PATH)
#
# The QA test backends' CMake files are written to be included by the server's build,
# which provides the core and backend targets they link; here a generated project does
# that part (FetchContent of common, core and backend, then add_subdirectory of the
# backend's own folder), and their CMake files run unchanged. `sequence` and
# `implicit_state` call cudaMemcpy/cudaMemset on inputs in GPU memory without a
# TRITON_ENABLE_GPU guard; for this CPU build a forced-include header declares those
# three calls as stubs that abort with a message (Nereid hands hosted backends CPU
# buffers, so they are never reached).
#
# Needs cmake, make, a C++17 compiler, RapidJSON headers and googletest's sources
# (Debian: cmake g++ rapidjson-dev googletest; Triton's common repository builds its
# tests unconditionally and fetches googletest otherwise). GCC 12 warns about
# repeat_backend's allocations, which its -Werror would make fatal: that one warning is
# kept a warning. Exit status: the number of backends that failed to build.
set -u

usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2; exit 2; }
[ $# -ge 2 ] || usage
SRC=$(cd "$1" && pwd) || exit 2
mkdir -p "$2/logs" || exit 2
OUT=$(cd "$2" && pwd)
shift 2

# name -> source folder (relative to SRC) and CMake target.
declare -A SOURCE=(
  [minimal]=backend/examples/backends/minimal
  [recommended]=backend/examples/backends/recommended
  [bls]=backend/examples/backends/bls
  [identity]=identity_backend
  [repeat]=repeat_backend
  [square]=square_backend
  [sequence]=server/src/test/sequence
  [dyna_sequence]=server/src/test/dyna_sequence
  [implicit_state]=server/src/test/implicit_state
  [iterative_sequence]=server/src/test/iterative_sequence
  [query]=server/src/test/query_backend
  [distributed_addsub]=server/src/test/distributed_addsub
  [volumebatching]=backend/examples/batching_strategies/volume_batching
  [singlebatching]=backend/examples/batching_strategies/single_batching
)
declare -A TARGET=(
  [minimal]=triton-minimal-backend
  [recommended]=triton-recommended-backend
  [bls]=triton-bls-backend
  [identity]=triton-identity-backend
  [repeat]=triton-repeat-backend
  [square]=triton-square-backend
  [sequence]=triton-sequence-backend
  [dyna_sequence]=triton-dyna-sequence-backend
  [implicit_state]=triton-implicit-state-backend
  [iterative_sequence]=triton-iterative-sequence-backend
  [query]=triton-query-backend
  [distributed_addsub]=triton-distributed-addsub-backend
  [volumebatching]=triton-volume-batching
  [singlebatching]=triton-single-batching
)
NAMES=("$@")
[ ${#NAMES[@]} -gt 0 ] || NAMES=(minimal recommended bls identity repeat square sequence dyna_sequence
  implicit_state iterative_sequence query distributed_addsub volumebatching singlebatching)

# The project that hosts one of the server's test backends (see the header).
wrapper() { # source_dir build_dir -> prints the wrapper's folder
  local dir=$2/wrapper
  mkdir -p "$dir"
  cat >"$dir/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.17)
project(nereid-hosts-triton-test-backend LANGUAGES C CXX)
include(FetchContent)
FetchContent_Declare(repo-common GIT_REPOSITORY https://github.com/triton-inference-server/common.git)
FetchContent_Declare(repo-core GIT_REPOSITORY https://github.com/triton-inference-server/core.git)
FetchContent_Declare(repo-backend GIT_REPOSITORY https://github.com/triton-inference-server/backend.git)
FetchContent_MakeAvailable(repo-common repo-core repo-backend)
add_subdirectory("$1" backend)
CMAKE
  cat >"$dir/no_cuda.h" <<'HEADER'
/* CPU build of Triton's QA test backends: the CUDA calls they make on GPU inputs. */
#pragma once
#include <cstddef>
#include <cstdio>
#include <cstdlib>
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
[[noreturn]] static inline void nereid_no_cuda(const char* call) {
  std::fprintf(stderr, "%s: this backend was built without CUDA\n", call);
  std::abort();
}
static inline int cudaMemcpy(void*, const void*, std::size_t, cudaMemcpyKind) {
  nereid_no_cuda("cudaMemcpy");
}
static inline int cudaMemset(void*, int, std::size_t) { nereid_no_cuda("cudaMemset"); }
HEADER
  echo "$dir"
}

for repo in backend core common; do
  [ -d "$SRC/$repo" ] || { echo "missing $SRC/$repo" >&2; exit 2; }
done
GTEST=${GTEST_SOURCE_DIR:-/usr/src/googletest}
[ -f "$GTEST/CMakeLists.txt" ] || { echo "googletest sources not found at $GTEST (Debian: apt-get install googletest)" >&2; exit 2; }

failed=0
for name in "${NAMES[@]}"; do
  source=${SOURCE[$name]:-}
  [ -n "$source" ] || { echo "unknown backend '$name'" >&2; failed=$((failed + 1)); continue; }
  build=$OUT/build/$name
  log=$OUT/logs/$name.log
  rm -rf "$build" && mkdir -p "$build"
  project=$SRC/$source
  flags="${CXXFLAGS:-} -Wno-error=mismatched-new-delete"
  case $source in
    server/*)
      project=$(wrapper "$SRC/$source" "$build")
      flags="$flags -include $project/no_cuda.h"
      ;;
  esac
  if cmake -S "$project" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTRITON_ENABLE_GPU=OFF \
       -DFETCHCONTENT_FULLY_DISCONNECTED=ON \
       -DFETCHCONTENT_SOURCE_DIR_REPO-COMMON="$SRC/common" \
       -DFETCHCONTENT_SOURCE_DIR_REPO-CORE="$SRC/core" \
       -DFETCHCONTENT_SOURCE_DIR_REPO-BACKEND="$SRC/backend" \
       -DFETCHCONTENT_SOURCE_DIR_GOOGLETEST="$GTEST" \
       -DCMAKE_CXX_FLAGS="$flags" >"$log" 2>&1 &&
     cmake --build "$build" --target "${TARGET[$name]}" -j "${JOBS:-2}" >>"$log" 2>&1; then
    mkdir -p "$OUT/$name"
    find "$build" -name "libtriton_$name.so" -exec cp {} "$OUT/$name/" \; -quit
    printf '%-12s built   %s\n' "$name" "$OUT/$name/libtriton_$name.so"
  else
    printf '%-12s FAILED  see %s\n' "$name" "$log"
    failed=$((failed + 1))
  fi
done
exit $failed
