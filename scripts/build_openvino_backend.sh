#!/usr/bin/env bash
# Builds Triton's own OpenVINO backend (triton-inference-server/openvino_backend, branch
# r24.10: Triton 2.51, the backend API Nereid implements) from its source with its own
# CMake files, against the OpenVINO runtime from PyPI's `openvino` wheel, for Nereid's
# --backend-directory: OUT_DIR/openvino/libtriton_openvino.so and, linked beside it, the
# OpenVINO libraries it loads (its RUNPATH is $ORIGIN, as in Triton's image). CPU only: the
# backend itself refuses any other instance kind.
#
# Usage: scripts/build_openvino_backend.sh OUT_DIR
#
# Which OpenVINO: 2024.4.0, the "Standalone OpenVINO" version of Triton 2.51 in the
# server's build.py (TRITON_VERSION_MAP), which build.py passes to this backend as
# TRITON_BUILD_OPENVINO_VERSION; PyPI has that exact release. Its wheel carries the C++
# runtime: openvino/include (the headers) and openvino/libs (libopenvino.so.2440, the CPU
# plugin, the IR/ONNX/... frontends, oneTBB), with no libopenvino.so link to build
# against; one is made here. The wheel's libraries use the pre-C++11 string ABI (its
# OpenVINOConfig.cmake says OpenVINO_GLIBCXX_USE_CXX11_ABI "0"), so the backend is
# compiled with _GLIBCXX_USE_CXX11_ABI=0 (it talks to Nereid through C only).
#
# How the backend's CMake is kept unchanged: it compiles against
# BUILD/openvino/include and links -lopenvino from BUILD/openvino/lib (plain variables,
# not cache options, so -D cannot move them), and makes those folders with a custom
# command that builds OpenVINO in docker and whose only output is
# BUILD/openvino/lib/openvino.so, with no other dependency. So the build folder is laid
# out first: include/ is the wheel's headers, lib/ holds libopenvino.so (the link to
# build against) and openvino.so (an existing output, so make never runs the docker
# step). TRITON_BUILD_OPENVINO_VERSION and TRITON_BUILD_CONTAINER_VERSION, which the
# CMake requires, only name what that docker step would have used.
#
# Inputs (cached outside the clone, built once):
#   NEREID_TRITON_SRC     folder with openvino_backend, core, backend, common at r24.10
#                         (default /var/cache/nereid/triton-src/r24.10, exported there
#                         from the bare repositories in NEREID_TRITON_MIRRORS, default
#                         /work/.mirror/triton-inference-server+<name>/repo, when missing)
#   NEREID_OPENVINO_CACHE the wheel and the unpacked runtime (default
#                         /var/cache/nereid/openvino)
#   PYTHON                a python with pip, to download the wheel (default .venv/bin/python)
# Exit status: 0 built (or already built from the same inputs), 1 the build failed (log
# named), 2 a prerequisite is missing (each one said on one line).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

[ $# -ge 1 ] || { sed -n '2,/^set -e/s/^# \{0,1\}//p' "$0" >&2; exit 2; }
mkdir -p "$1"
OUT=$(cd "$1" && pwd)

OPENVINO_VERSION=2024.4.0
OPENVINO_SOVERSION=2440 # libopenvino.so.<this>, the wheel's only name for the runtime
BRANCH=r24.10
CONTAINER_VERSION=24.10 # Triton 2.51's container, for the CMake's (unused) docker step
SRC=${NEREID_TRITON_SRC:-/var/cache/nereid/triton-src/$BRANCH}
MIRRORS=${NEREID_TRITON_MIRRORS:-/work/.mirror}
CACHE=${NEREID_OPENVINO_CACHE:-/var/cache/nereid/openvino}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
RUNTIME=$CACHE/openvino-$OPENVINO_VERSION
WHEEL_TAGS=cp311-cp311-manylinux2014_x86_64 # the one wheel fetched (see step 3)

LOG_NAME=build_openvino_backend
# shellcheck source=scripts/backend_build_lib.sh
. "$ROOT/scripts/backend_build_lib.sh"
SOURCES=(openvino_backend core backend common)

# 1. Prerequisites, one line each.
need_build_tools 3.17
need_pip "$PYTHON" "$CACHE/.wheel-$OPENVINO_VERSION" "openvino==$OPENVINO_VERSION"
need_sources "${SOURCES[@]}"
[ $missing -eq 0 ] || exit 2

# 2. The sources, exported once from the bare repositories.
export_sources "${SOURCES[@]}"

# 3. The OpenVINO runtime from the wheel. Its C++ libraries are the same in every
# cpXY wheel of a release, so one fixed tag is fetched whatever python runs pip.
mkdir -p "$CACHE"
if [ ! -f "$CACHE/.wheel-$OPENVINO_VERSION" ]; then
  log "downloading openvino==$OPENVINO_VERSION into $CACHE (about 43 MB)"
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
    --python-version 3.11 -d "$CACHE" "openvino==$OPENVINO_VERSION"
  wheels=("$CACHE"/openvino-"$OPENVINO_VERSION"-*-"$WHEEL_TAGS".whl)
  [ -f "${wheels[0]}" ] || { log "FAILED: pip left no openvino-$OPENVINO_VERSION-*-$WHEEL_TAGS.whl in $CACHE"; exit 1; }
  touch "$CACHE/.wheel-$OPENVINO_VERSION"
fi
if [ ! -f "$RUNTIME/.unpacked" ]; then
  log "unpacking the OpenVINO headers and libraries into $RUNTIME"
  rm -rf "$RUNTIME" && mkdir -p "$RUNTIME/wheel"
  wheels=("$CACHE"/openvino-"$OPENVINO_VERSION"-*-"$WHEEL_TAGS".whl)
  unzip -q -o "${wheels[0]}" 'openvino/libs/*' 'openvino/include/*' -d "$RUNTIME/wheel"
  [ -f "$RUNTIME/wheel/openvino/libs/libopenvino.so.$OPENVINO_SOVERSION" ] ||
    { log "FAILED: the wheel has no openvino/libs/libopenvino.so.$OPENVINO_SOVERSION"; exit 1; }
  [ -f "$RUNTIME/wheel/openvino/include/openvino/openvino.hpp" ] ||
    { log "FAILED: the wheel has no openvino/include/openvino/openvino.hpp"; exit 1; }
  touch "$RUNTIME/.unpacked"
fi
OV_INCLUDE=$RUNTIME/wheel/openvino/include
OV_LIBS=$RUNTIME/wheel/openvino/libs

# 4. The backend, with its own CMake files, in a build folder laid out as above.
dest=$OUT/openvino
stamp=$dest/.built-$BRANCH-openvino$OPENVINO_VERSION
if [ -f "$stamp" ] && [ -f "$dest/libtriton_openvino.so" ]; then
  log "already built: $dest/libtriton_openvino.so"
  exit 0
fi
build=$OUT/build/openvino-cpu
logfile=$OUT/logs/openvino.log
rm -rf "$build" "$dest"
mkdir -p "$OUT/logs" "$build/openvino/lib"
ln -s "$OV_INCLUDE" "$build/openvino/include"
ln -s "$OV_LIBS/libopenvino.so.$OPENVINO_SOVERSION" "$build/openvino/lib/libopenvino.so"
ln -s "$OV_LIBS/libopenvino.so.$OPENVINO_SOVERSION" "$build/openvino/lib/openvino.so"
log "building openvino_backend $BRANCH against OpenVINO $OPENVINO_VERSION (about a minute; log $logfile)"
if ! { cmake -S "$SRC/openvino_backend" -B "$build" -DCMAKE_BUILD_TYPE=Release \
         -DTRITON_BUILD_OPENVINO_VERSION="$OPENVINO_VERSION" \
         -DTRITON_BUILD_CONTAINER_VERSION="$CONTAINER_VERSION" \
         -DFETCHCONTENT_FULLY_DISCONNECTED=ON \
         -DFETCHCONTENT_SOURCE_DIR_REPO-COMMON="$SRC/common" \
         -DFETCHCONTENT_SOURCE_DIR_REPO-CORE="$SRC/core" \
         -DFETCHCONTENT_SOURCE_DIR_REPO-BACKEND="$SRC/backend" \
         -DFETCHCONTENT_SOURCE_DIR_GOOGLETEST="$GTEST" \
         -DCMAKE_CXX_FLAGS="-D_GLIBCXX_USE_CXX11_ABI=0 ${CXXFLAGS:-}" >"$logfile" 2>&1 &&
       cmake --build "$build" --target triton-openvino-backend -j "${JOBS:-2}" >>"$logfile" 2>&1; }; then
  log "FAILED: see $logfile"
  tail -20 "$logfile" >&2
  exit 1
fi
# The docker step writes its Dockerfile first: if it is there, make ran it.
if [ -e "$build/Dockerfile.openvino" ]; then
  log "FAILED: the CMake's docker step ran (see $logfile); the build folder layout no longer stops it"
  exit 1
fi

# 5. The backend folder: the library and, linked from the cache, the OpenVINO runtime.
# OpenVINO finds its plugins and frontends (libopenvino_intel_cpu_plugin.so,
# libopenvino_ir_frontend.so.*) beside libopenvino.so, so all of them go there, as in
# Triton's image. Triton's CMake also writes a plugins.xml naming the CPU plugin; the
# wheel's libopenvino.so has its plugin list built in, so none is written here.
mkdir -p "$dest"
cp "$build/libtriton_openvino.so" "$dest/"
ln -sf "$OV_LIBS"/*.so* "$dest/"
touch "$stamp"
log "built $dest/libtriton_openvino.so"
