#!/usr/bin/env bash
# Nereid beside the real Triton 2.51 (../shared/triton) under the same perf_analyzer and
# nereid-bench loads: server CPU per request (from /proc), throughput and p50/p99 for both,
# rounds alternating between the servers, then ONNX Runtime in-process against the served
# mlp_large in CPU per inference. About 15 minutes on the 2-core machine with the defaults;
# the options of scripts/bench_vs_triton.py narrow it, e.g.
#   scripts/bench_vs_triton.sh --cells cache_grpc_c4 --tools nereid-bench --servers nereid --rounds 1
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
cargo build --release --locked -p nereid-server -p nereid-bench -p nereid-backend-onnx --example ort_inprocess
exec .venv/bin/python scripts/bench_vs_triton.py "$@"
