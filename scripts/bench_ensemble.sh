#!/usr/bin/env bash
# Ensemble per-step overhead (BENCHMARKS.md section 8): an ensemble of N trivial steps
# (ensemble_add_ones_N, each step add_ones_1) against one model doing the same N additions
# (add_ones_N), N = 1, 4, 16, over gRPC at concurrency 1. The two run side by side, in
# ROUNDS alternating rounds on one server; the report takes medians over the rounds.
#
#   scripts/bench_ensemble.sh [MODELS_DIR]   # run by scripts/bench.sh; alone, it builds
#                                           # what it needs and makes its own models
#   .venv/bin/python scripts/bench_report.py bench/results --section ensemble
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=bench/results
BENCH=target/release/nereid-bench
WINDOW=${WINDOW:-1500}
ROUNDS=${ROUNDS:-3}
MODELS=${1:-}
if [[ -z $MODELS ]]; then
  scripts/setup.sh
  cargo build --release --locked -p nereid-bench
  MODELS=$(mktemp -d)/models
  .venv/bin/python scripts/make_bench_models.py "$MODELS" >/dev/null
fi
mkdir -p "$OUT"
# shellcheck source=scripts/bench_lib.sh
source scripts/bench_lib.sh

start_nereid "$MODELS"
for round in $(seq "$ROUNDS"); do
  for n in 1 4 16; do
    run_bench "ensemble_single_${n}_r$round" "add_ones_$n" "$GRPC" grpc 1:1:1
    run_bench "ensemble_steps_${n}_r$round" "ensemble_add_ones_$n" "$GRPC" grpc 1:1:1
  done
done
kill "$PID"; wait "$PID" || true
