#!/usr/bin/env bash
# Builds Triton's own PyTorch backend (triton-inference-server/pytorch_backend, branch
# r24.10: Triton 2.51, the backend API Nereid implements) from its source with its own
# CMake files, against libtorch from PyPI's `torch` wheel, for Nereid's
# --backend-directory: OUT_DIR/pytorch/libtriton_pytorch.so and the libraries it loads
# beside it (its RUNPATH is $ORIGIN, as in Triton's image).
#
# Usage: scripts/build_pytorch_backend.sh OUT_DIR [--gpu]
#
# Which torch: 2.5.1, the PyPI release nearest the PyTorch 2.5.0a0 of NGC's 24.10
# container that Triton 2.51's pytorch backend was built and tested against. PyPI's
# Linux wheels are CUDA builds; a CPU build needs only libtorch_cpu.so and libc10.so
# from it (plus the two small CUDA runtime libraries libtorch_cpu.so is linked to, from
# the nvidia-cuda-runtime-cu12 and nvidia-cuda-cupti-cu12 wheels). The backend links
# `-ltorch`; for the CPU build that is a two-line shared library made here that loads
# libtorch_cpu.so and libc10.so (what libtorch.so is in PyTorch's own CPU packages),
# instead of the wheel's, which would pull in libtorch_cuda.so and cuBLAS/cuDNN.
# torch 2.5's PyPI wheels use the pre-C++11 string ABI, so everything is compiled with
# _GLIBCXX_USE_CXX11_ABI=0 (the backend talks to Nereid through C only).
#
# --gpu: the GPU variant (TRITON_ENABLE_GPU=ON) for the device machine, whose python3
# holds PyTorch 2.11.0+cu130 (CUDA 13, C++11 string ABI): built here against the same
# release from PyPI (torch 2.11.0 cp312, whose Linux wheel is the CUDA 13 build) with
# CUDA 13's compiler, runtime and headers from PyPI's nvidia-cuda-nvcc, -runtime, -crt
# and nvidia-nvvm wheels (no CUDA install needed; nvcc compiles the backend utilities'
# one kernel). CUDA 13 has dropped the pre-Turing architectures the backend repository
# lists for that kernel, so it is built for Hopper (sm_90, the H100 and H200) alone.
# OUT_DIR/pytorch then holds only libtriton_pytorch.so: at run time its folder
# gets links to the device's torch/lib and nvidia/cu13/lib (scripts/gpu_check.sh).
#
# Inputs (cached outside the clone, built once):
#   NEREID_TRITON_SRC  folder with pytorch_backend, core, backend, common at r24.10
#                      (default /var/cache/nereid/triton-src/r24.10, exported there from
#                      the bare repositories in NEREID_TRITON_MIRRORS, default
#                      /work/.mirror/triton-inference-server+<name>/repo, when missing)
#   NEREID_TORCH_CACHE wheels and the unpacked libtorch (default /var/cache/nereid/torch)
#   PYTHON             a python with pip, to download the wheels (default .venv/bin/python)
# Exit status: 0 built (or already built from the same inputs), 1 the build failed (log
# named), 2 a prerequisite is missing (each one said on one line).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

[ $# -ge 1 ] || { sed -n '2,/^set -e/s/^# \{0,1\}//p' "$0" >&2; exit 2; }
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
GPU=OFF
[ "${2:-}" = --gpu ] && GPU=ON

TORCH_VERSION=2.5.1
CUDA_RT_VERSION=12.4.127
if [ "$GPU" = ON ]; then
  TORCH_VERSION=2.11.0
  # nvcc, nvvm and crt share a version; the runtime has its own.
  CUDA_WHEELS="nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-runtime==13.0.96"
fi
BRANCH=r24.10
SRC=${NEREID_TRITON_SRC:-/var/cache/nereid/triton-src/$BRANCH}
MIRRORS=${NEREID_TRITON_MIRRORS:-/work/.mirror}
CACHE=${NEREID_TORCH_CACHE:-/var/cache/nereid/torch}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
LIBTORCH=$CACHE/libtorch-$TORCH_VERSION
CUDA_TOOLKIT=$CACHE/cuda-13.0

LOG_NAME=build_pytorch_backend
# shellcheck source=scripts/backend_build_lib.sh
. "$ROOT/scripts/backend_build_lib.sh"
SOURCES=(pytorch_backend core backend common)

# 1. Prerequisites, one line each.
need_build_tools 3.18
# torch's headers include Python.h: a python3 whose headers are installed, for CMake.
PY_HEADERS=
for py in $(which -a python3 2>/dev/null) /usr/bin/python3; do
  include=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null) || continue
  if [ -f "$include/Python.h" ]; then
    PY_HEADERS=$include
    PY_EXE=$("$py" -c 'import sys; print(sys.executable)')
    break
  fi
done
[ -n "$PY_HEADERS" ] || need "Python's C headers, which torch's headers include (Debian: apt-get install python3-dev)"
need_pip "$PYTHON" "$CACHE/.wheels-$TORCH_VERSION" "torch==$TORCH_VERSION"
need_sources "${SOURCES[@]}"
[ $missing -eq 0 ] || exit 2

# 2. The sources, exported once from the bare repositories.
export_sources "${SOURCES[@]}"

# 3. libtorch from the wheels: headers, libtorch_cpu/libc10 and what they load.
mkdir -p "$CACHE"
if [ "$GPU" = ON ] && [ ! -f "$CACHE/.wheels-$TORCH_VERSION" ]; then
  log "downloading torch==$TORCH_VERSION (cp312, CUDA 13) and CUDA 13's compiler wheels into $CACHE (about 630 MB)"
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
    --python-version 3.12 --implementation cp -d "$CACHE" "torch==$TORCH_VERSION"
  # shellcheck disable=SC2086 # one word per wheel
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_12_x86_64 -d "$CACHE" $CUDA_WHEELS
  touch "$CACHE/.wheels-$TORCH_VERSION"
fi
if [ "$GPU" = ON ] && [ ! -f "$LIBTORCH/.unpacked" ]; then
  log "unpacking libtorch's headers and libraries into $LIBTORCH, CUDA 13 into $CUDA_TOOLKIT"
  rm -rf "$LIBTORCH" "$CUDA_TOOLKIT" && mkdir -p "$LIBTORCH/wheel" "$CUDA_TOOLKIT"
  unzip -q -o "$CACHE"/torch-"$TORCH_VERSION"-cp312-*.whl 'torch/lib/*' 'torch/include/*' -d "$LIBTORCH/wheel"
  for wheel in "$CACHE"/nvidia_cuda_nvcc-13.*.whl "$CACHE"/nvidia_cuda_crt-13.*.whl \
    "$CACHE"/nvidia_nvvm-13.*.whl "$CACHE"/nvidia_cuda_runtime-13.*.whl; do
    unzip -q -o "$wheel" 'nvidia/cu13/*' -d "$CUDA_TOOLKIT"
  done
  # A toolkit's layout, as CMake's CUDA support looks for it: lib64, an unversioned cudart.
  ln -sfn lib "$CUDA_TOOLKIT/nvidia/cu13/lib64"
  ln -sf libcudart.so.13 "$CUDA_TOOLKIT/nvidia/cu13/lib/libcudart.so"
  touch "$LIBTORCH/.unpacked"
fi
if [ "$GPU" = OFF ] && [ ! -f "$CACHE/.wheels-$TORCH_VERSION" ]; then
  log "downloading torch==$TORCH_VERSION and the CUDA runtime wheels into $CACHE (about 920 MB)"
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --platform manylinux1_x86_64 \
    --python-version 3.11 -d "$CACHE" "torch==$TORCH_VERSION"
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: -d "$CACHE" \
    "nvidia-cuda-runtime-cu12==$CUDA_RT_VERSION" "nvidia-cuda-cupti-cu12==$CUDA_RT_VERSION"
  touch "$CACHE/.wheels-$TORCH_VERSION"
fi
if [ "$GPU" = OFF ] && [ ! -f "$LIBTORCH/.unpacked" ]; then
  log "unpacking libtorch into $LIBTORCH"
  rm -rf "$LIBTORCH" && mkdir -p "$LIBTORCH/wheel" "$LIBTORCH/cpu"
  unzip -q -o "$CACHE"/torch-"$TORCH_VERSION"-*.whl 'torch/lib/*' 'torch/include/*' -d "$LIBTORCH/wheel"
  for wheel in "$CACHE"/nvidia_cuda_runtime_cu12-*.whl "$CACHE"/nvidia_cuda_cupti_cu12-*.whl; do
    unzip -q -o "$wheel" 'nvidia/*/lib/*' -d "$LIBTORCH/wheel"
  done
  # The CPU build's library folder (the backend's CMake takes one): the CPU libtorch.so,
  # no code of its own, loading libtorch_cpu.so and libc10.so, beside what those load.
  cpu=$LIBTORCH/cpu
  for lib in "$LIBTORCH"/wheel/torch/lib/{libtorch_cpu.so,libc10.so,libgomp-*.so.1} \
    "$LIBTORCH"/wheel/nvidia/cuda_runtime/lib/libcudart.so.12 \
    "$LIBTORCH"/wheel/nvidia/cuda_cupti/lib/libcupti.so.12; do
    ln -sf "$lib" "$cpu/"
  done
  echo 'void nereid_cpu_libtorch(void) {}' >"$cpu/facade.c"
  cc -shared -fPIC -o "$cpu/libtorch.so" -Wl,-soname,libtorch.so "$cpu/facade.c" \
    -Wl,--no-as-needed -L"$cpu" -ltorch_cpu -lc10 -Wl,-rpath-link,"$cpu" -Wl,-rpath,'$ORIGIN'
  rm "$cpu/facade.c"
  # A header the backend includes (and uses nothing of) that PyPI's wheels leave out:
  # the legacy fuser switches libtorch_cpu.so exports, declared here.
  shim=$LIBTORCH/include-extra/torch/csrc/jit/codegen/fuser
  mkdir -p "$shim"
  cat >"$shim/interface.h" <<'HEADER'
/* Not shipped in PyPI's torch wheels; pytorch_backend r24.10 includes it. */
#pragma once
#include <torch/csrc/Export.h>
namespace torch::jit {
TORCH_API bool canFuseOnCPU();
TORCH_API bool canFuseOnGPU();
TORCH_API void overrideCanFuseOnCPU(bool value);
TORCH_API void overrideCanFuseOnGPU(bool value);
}  // namespace torch::jit
HEADER
  touch "$LIBTORCH/.unpacked"
fi
TORCH_LIB=$LIBTORCH/wheel/torch/lib
TORCH_INCLUDE="$LIBTORCH/wheel/torch/include;$LIBTORCH/wheel/torch/include/torch/csrc/api/include;$LIBTORCH/include-extra"
LIB_DIR=$LIBTORCH/cpu
BACKEND_SRC=$SRC/backend
# The CPU build matches torch 2.5.1's pre-C++11 string ABI; the GPU one torch 2.11's.
CXX_FLAGS="-D_GLIBCXX_USE_CXX11_ABI=0 ${CXXFLAGS:-}"
GPU_FLAGS=()
if [ "$GPU" = ON ]; then
  LIB_DIR=$TORCH_LIB
  CXX_FLAGS=${CXXFLAGS:-}
  toolkit=$CUDA_TOOLKIT/nvidia/cu13
  GPU_FLAGS=(-DCUDAToolkit_ROOT="$toolkit" -DCMAKE_CUDA_COMPILER="$toolkit/bin/nvcc")
fi

# 4. The backend, with its own CMake files.
dest=$OUT/pytorch
stamp=$dest/.built-$BRANCH-torch$TORCH_VERSION-gpu$GPU
if [ -f "$stamp" ] && [ -f "$dest/libtriton_pytorch.so" ]; then
  log "already built: $dest/libtriton_pytorch.so"
  exit 0
fi
build=$OUT/build/pytorch-$( [ "$GPU" = ON ] && echo gpu || echo cpu )
logfile=$OUT/logs/pytorch.log
rm -rf "$build" "$dest"
mkdir -p "$OUT/logs" "$build"
if [ "$GPU" = ON ]; then
  # The backend utilities' kernel for Hopper alone (see --gpu above), in a copy.
  BACKEND_SRC=$build/backend-src
  cp -r "$SRC/backend" "$BACKEND_SRC"
  sed -i 's/CUDA_ARCHITECTURES "[^"]*"/CUDA_ARCHITECTURES "90"/' "$BACKEND_SRC/CMakeLists.txt"
fi
log "building pytorch_backend $BRANCH (TRITON_ENABLE_GPU=$GPU; a few minutes; log $logfile)"
if ! { cmake -S "$SRC/pytorch_backend" -B "$build" -DCMAKE_BUILD_TYPE=Release \
         -DTRITON_ENABLE_GPU="$GPU" -DTRITON_PYTORCH_ENABLE_TORCHVISION=OFF \
         -DPython3_EXECUTABLE="$PY_EXE" -DPython3_INCLUDE_DIR="$PY_HEADERS" \
         -DTRITON_PYTORCH_INCLUDE_PATHS="$TORCH_INCLUDE" -DTRITON_PYTORCH_LIB_PATHS="$LIB_DIR" \
         -DFETCHCONTENT_FULLY_DISCONNECTED=ON \
         -DFETCHCONTENT_SOURCE_DIR_REPO-COMMON="$SRC/common" \
         -DFETCHCONTENT_SOURCE_DIR_REPO-CORE="$SRC/core" \
         -DFETCHCONTENT_SOURCE_DIR_REPO-BACKEND="$BACKEND_SRC" \
         -DFETCHCONTENT_SOURCE_DIR_GOOGLETEST="$GTEST" "${GPU_FLAGS[@]}" \
         -DCMAKE_CXX_FLAGS="$CXX_FLAGS" >"$logfile" 2>&1 &&
       cmake --build "$build" --target triton-pytorch-backend -j "${JOBS:-2}" >>"$logfile" 2>&1; }; then
  log "FAILED: see $logfile"
  tail -20 "$logfile" >&2
  exit 1
fi

# 5. The backend folder: the library and, for the CPU build, linked from the cache, what
#    it loads (the GPU build loads the device's torch).
mkdir -p "$dest"
cp "$build/libtriton_pytorch.so" "$dest/"
[ "$GPU" = ON ] || ln -sf "$LIBTORCH"/cpu/* "$dest/"
touch "$stamp"
log "built $dest/libtriton_pytorch.so"
