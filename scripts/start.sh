#!/usr/bin/env bash
# One command from a fresh checkout to a running server on the example repository.
# Extra arguments go to nereid (e.g. --http-port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec target/release/nereid --model-repository examples/models "$@"
