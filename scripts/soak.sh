#!/usr/bin/env bash
# Soak test (issue 38): the real nereid binary under mixed traffic, every answer checked,
# for DURATION_SECONDS while its model repository changes; gauges (RSS, fds, threads,
# /dev/shm, pending requests, live sequences) sampled once a second and their growth after
# the warm-up checked against the bounds at the top of scripts/soak.py. Exits non-zero on
# a wrong answer, an unexpected error, a dead server or a bound exceeded.
#   scripts/soak.sh DURATION_SECONDS [OUT_DIR]
# NEREID_BIN (default target/release/nereid) is copied to a private path first, so a
# rebuild during the run does not affect it. Writes samples.csv, summary.json and
# summary.txt into OUT_DIR (default: a new temporary folder).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: scripts/soak.sh DURATION_SECONDS [OUT_DIR]" >&2
  exit 2
fi
# The server runs from a copy outside the checkout, so it cannot find the onnxruntime
# wheel beside itself: name the library (as scripts/run_triton_qa.sh does).
if [ -z "${ORT_DYLIB_PATH:-}" ]; then
  for lib in "$PWD"/.venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.1*; do
    [ -f "$lib" ] && export ORT_DYLIB_PATH=$lib
  done
fi
exec .venv/bin/python scripts/soak.py "$@"
