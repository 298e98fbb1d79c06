#!/usr/bin/env bash
# The whole test suite: Rust unit and integration tests, then the tritonclient
# conformance suite against the real nereid binary. Everything runs in the release
# profile so dependencies are compiled once.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

echo "test: cargo test (release)" >&2
cargo test --release --locked --workspace

echo "test: tritonclient conformance suite" >&2
NEREID_BIN="$PWD/target/release/nereid" .venv/bin/python -m pytest -q tests/python
