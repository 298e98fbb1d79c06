#!/usr/bin/env bash
# Builds Triton's C API tests (the gtests of triton-inference-server/core's src/test that
# use only the public headers) against Nereid's libtritonserver.so, for the QA suites
# that run them: Triton's image builds them with its server and Dockerfile.QA copies each
# beside its suite's test.sh, which scripts/run_triton_qa.sh does with these
# (TRITON_CAPI_TESTS).
#
# Usage: scripts/build_triton_capi_tests.sh CORE_DIR LIB_DIR OUT_DIR [SERVER_DIR]
#
#   CORE_DIR    a checkout (or `git archive`) of triton-inference-server/core with
#               include/ and src/test/
#   LIB_DIR     the folder holding Nereid's libtritonserver.so (e.g. target/suite)
#   OUT_DIR     receives the test programs and OUT_DIR/logs/<test>.log
#   SERVER_DIR  optional: a checkout (or `git archive`) of triton-inference-server/server
#               with src/; then the server's in-process programs are built too: simple
#               (L0_simple_lib) and multi_server (L0_multi_server); memory_alloc (L0_io)
#               too when CUDA_RUNTIME_DIR is set (below).
#
# memory_alloc calls the CUDA runtime whatever the memory types asked (Triton builds it
# only with GPU support), so it needs CUDA's headers and libcudart, which PyPI's CUDA
# wheels carry: CUDA_RUNTIME_DIR is a folder where the nvidia-cuda-runtime-cu12 and
# nvidia-cuda-nvcc-cu12 wheels (`pip download --no-deps nvidia-cuda-runtime-cu12==12.6.77
# nvidia-cuda-nvcc-cu12==12.6.77`) are unzipped: its nvidia/cuda_runtime holds include/
# and lib/libcudart.so.12, its nvidia/cuda_nvcc/include the crt headers. The program
# finds libcudart there at run time; without a GPU its host-memory runs work and the
# runs placing tensors on a GPU fail in cudaSetDevice.
#
# The tests and their suites: register_api_test (L0_register), query_test (L0_query),
# backend_output_detail_test (L0_backend_output_detail), input_byte_size_test
# (L0_input_validation), request_cancellation_test (L0_request_cancellation). The core's
# other tests exercise its internal classes (memory managers, the work queue, the cache
# and repository-agent internals), not the C API, and cannot be built against another
# implementation. Needs a C++17 compiler and googletest with gmock (Debian: g++
# libgtest-dev libgmock-dev) and, for the server's programs, RapidJSON (rapidjson-dev).
# Exit status: the number of programs that failed to build.
set -u

usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2; exit 2; }
[ $# -eq 3 ] || [ $# -eq 4 ] || usage
CORE=$(cd "$1" && pwd) || usage
LIB=$(cd "$2" && pwd) || usage
OUT=$3
[ -f "$LIB/libtritonserver.so" ] || { echo "no libtritonserver.so in $LIB" >&2; exit 2; }
mkdir -p "$OUT/logs"

failed=0
for test in register_api_test query_test backend_output_detail_test input_byte_size_test \
  request_cancellation_test; do
  source=$CORE/src/test/$test.cc
  if [ ! -f "$source" ]; then
    echo "$test: $source is missing" >&2
    failed=$((failed + 1))
    continue
  fi
  if g++ -std=c++17 -O1 -o "$OUT/$test" "$source" -I"$CORE/include" \
    -L"$LIB" -ltritonserver -lgmock -lgtest_main -lgtest -lpthread > "$OUT/logs/$test.log" 2>&1; then
    echo "$test: built"
  else
    echo "$test: failed (see $OUT/logs/$test.log)" >&2
    failed=$((failed + 1))
  fi
done
if [ $# -eq 4 ]; then
  SERVER=$(cd "$4" && pwd) || usage
  for program in simple multi_server; do
    if g++ -std=c++17 -O1 -o "$OUT/$program" "$SERVER/src/$program.cc" -I"$SERVER/src" \
      -I"$CORE/include" -L"$LIB" -ltritonserver -lpthread > "$OUT/logs/$program.log" 2>&1; then
      echo "$program: built"
    else
      echo "$program: failed (see $OUT/logs/$program.log)" >&2
      failed=$((failed + 1))
    fi
  done
  cuda=${CUDA_RUNTIME_DIR:+$(cd "$CUDA_RUNTIME_DIR" && pwd)/nvidia}
  if [ -n "$cuda" ]; then
    if g++ -std=c++17 -O1 -DTRITON_ENABLE_GPU=1 -DTRITON_MIN_COMPUTE_CAPABILITY=6.0 \
      -o "$OUT/memory_alloc" "$SERVER/src/memory_alloc.cc" -I"$SERVER/src" -I"$CORE/include" \
      -I"$cuda/cuda_runtime/include" -I"$cuda/cuda_nvcc/include" -L"$LIB" -ltritonserver \
      -L"$cuda/cuda_runtime/lib" -l:libcudart.so.12 -Wl,-rpath,"$cuda/cuda_runtime/lib" \
      -lpthread > "$OUT/logs/memory_alloc.log" 2>&1; then
      echo "memory_alloc: built"
    else
      echo "memory_alloc: failed (see $OUT/logs/memory_alloc.log)" >&2
      failed=$((failed + 1))
    fi
  fi
fi
exit "$failed"
