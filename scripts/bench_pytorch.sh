#!/usr/bin/env bash
# Server CPU per inference of a TorchScript model served by Nereid through Triton's pytorch
# backend, beside the same model run by libtorch in-process (BENCHMARKS.md section 28).
# Builds the backend (scripts/build_pytorch_backend.sh, cached) and, against the same
# cached libtorch, bench/pytorch/make_mlp.cc (writes the model: Linear 256->256, ReLU,
# Linear 256->16, fixed weights) and bench/pytorch/inprocess_mlp.cc (the in-process loop);
# then bench/pytorch/run_bench.py starts nereid on free ports (port 0, read back from its
# log), alternates the in-process program with load phases over HTTP (binary tensors),
# gRPC and HTTP with JSON tensors at batch 1 and 8, and prints a markdown table. One
# intra-op and one inter-op thread in both (model config parameters and at::set_num_threads),
# and OMP_NUM_THREADS=1 in both environments (--omp-env unset leaves it out).
#   scripts/bench_pytorch.sh [run_bench.py options: --rounds 5 --threads 1 --omp-env set ...]
# NEREID_BIN (default target/release/nereid), NEREID_BENCH_BIN (default
# target/release/nereid-bench). Build outputs and scratch: BENCH_PYTORCH_WORK
# (default /tmp/bench-pytorch). Cache: NEREID_CACHE (default /var/cache/nereid).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${NEREID_CACHE:-/var/cache/nereid}
WORK=${BENCH_PYTORCH_WORK:-/tmp/bench-pytorch}
LIBTORCH=$CACHE/torch/libtorch-2.5.1
mkdir -p "$WORK"
scripts/build_pytorch_backend.sh "$CACHE/backends"
for prog in make_mlp inprocess_mlp; do
  if [ ! -x "$WORK/$prog" ] || [ "bench/pytorch/$prog.cc" -nt "$WORK/$prog" ]; then
    echo "bench_pytorch: compiling bench/pytorch/$prog.cc" >&2
    c++ -std=c++17 -O2 -D_GLIBCXX_USE_CXX11_ABI=0 -I"$LIBTORCH/wheel/torch/include" \
      -I"$LIBTORCH/wheel/torch/include/torch/csrc/api/include" "bench/pytorch/$prog.cc" \
      -L"$LIBTORCH/cpu" -ltorch_cpu -lc10 -pthread -Wl,-rpath,"$LIBTORCH/cpu" \
      -Wl,-rpath-link,"$LIBTORCH/cpu" -o "$WORK/$prog"
  fi
done
"$WORK/make_mlp" "$WORK/mlp.pt" >/dev/null
exec .venv/bin/python bench/pytorch/run_bench.py --nereid "${NEREID_BIN:-$PWD/target/release/nereid}" \
  --bench "${NEREID_BENCH_BIN:-$PWD/target/release/nereid-bench}" --inprocess "$WORK/inprocess_mlp" \
  --model "$WORK/mlp.pt" --backends "$CACHE/backends" --work "$WORK" "$@"
