#!/usr/bin/env bash
# Nereid beside the real Triton 2.51 (../shared/triton) under the same perf_analyzer and
# nereid-bench loads (and wrk on the HTTP cache hit): server CPU per request from /proc, user
# and system apart, throughput and p50/p99 for both, rounds alternating between the servers;
# nginx answering a fixed 200 of the same body under the same wrk load as the HTTP floor
# (what ../shared/triton/floor.sh measures; nginx-light and wrk are apt-installed if missing),
# and beside it tokio+hyper doing the same (the hyper_floor example: Nereid's stack's floor);
# the same with a round trip to a worker thread per request (hyper_floor --handoff: a model
# request's floor); on the gRPC cache hit, tokio+hyper+tonic answering fixed bytes (grpc_floor);
# then ONNX Runtime in-process against the served mlp_large in CPU per inference. About 15
# minutes on the 2-core machine with the defaults; the options of scripts/bench_vs_triton.py
# narrow it, e.g.
#   scripts/bench_vs_triton.sh --cells cache_grpc_c4 --tools nereid-bench --servers nereid --rounds 1
# --allocs adds heap allocations and bytes per request (cache hit and model, HTTP and gRPC),
# on separate servers run under the LD_PRELOAD counter scripts/alloc_count.c (built with cc);
# alone:  scripts/bench_vs_triton.sh --allocs --rounds 0 --ort-batches ''
# --nereid/--bench/--ort-inprocess run copied binaries (then run the .py directly, not this,
# which builds target/).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
cargo build --release --locked -p nereid-server -p nereid-bench -p nereid-backend-onnx --example ort_inprocess
cargo build --release --locked -p nereid-http --example hyper_floor
cargo build --release --locked -p nereid-grpc --example grpc_floor
exec .venv/bin/python scripts/bench_vs_triton.py "$@"
