#!/usr/bin/env bash
# Builds Triton's own C++ backends from their source with their own CMake files, for
# Nereid's --backend-directory (issue 39). Nothing here links Triton's server: the
# backends' dependency on libtritonserver.so is satisfied by Nereid at load time.
#
# Usage: scripts/build_triton_backends.sh SRC_DIR OUT_DIR [NAME...]
#
#   SRC_DIR  each repository checked out under its own name, at one release branch
#            (r24.10 is Triton 2.51, the version Nereid matches):
#            SRC_DIR/backend, core, common, identity_backend, repeat_backend, square_backend
#            (clones of github.com/triton-inference-server/<name>). CMake's FetchContent
#            steps are pointed at these folders, so the build needs no network.
#   OUT_DIR  receives OUT_DIR/<name>/libtriton_<name>.so, the layout --backend-directory
#            expects, and OUT_DIR/logs/<name>.log
#   NAME     which to build (default: all): minimal recommended bls identity repeat square
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
)
declare -A TARGET=(
  [minimal]=triton-minimal-backend
  [recommended]=triton-recommended-backend
  [bls]=triton-bls-backend
  [identity]=triton-identity-backend
  [repeat]=triton-repeat-backend
  [square]=triton-square-backend
)
NAMES=("$@")
[ ${#NAMES[@]} -gt 0 ] || NAMES=(minimal recommended bls identity repeat square)

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
  if cmake -S "$SRC/$source" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTRITON_ENABLE_GPU=OFF \
       -DFETCHCONTENT_FULLY_DISCONNECTED=ON \
       -DFETCHCONTENT_SOURCE_DIR_REPO-COMMON="$SRC/common" \
       -DFETCHCONTENT_SOURCE_DIR_REPO-CORE="$SRC/core" \
       -DFETCHCONTENT_SOURCE_DIR_REPO-BACKEND="$SRC/backend" \
       -DFETCHCONTENT_SOURCE_DIR_GOOGLETEST="$GTEST" \
       -DCMAKE_CXX_FLAGS="${CXXFLAGS:-} -Wno-error=mismatched-new-delete" >"$log" 2>&1 &&
     cmake --build "$build" --target "${TARGET[$name]}" -j "${JOBS:-2}" >>"$log" 2>&1; then
    mkdir -p "$OUT/$name"
    cp "$build/libtriton_$name.so" "$OUT/$name/"
    printf '%-12s built   %s\n' "$name" "$OUT/$name/libtriton_$name.so"
  else
    printf '%-12s FAILED  see %s\n' "$name" "$log"
    failed=$((failed + 1))
  fi
done
exit $failed
