#!/usr/bin/env bash
# One command from a fresh checkout to a running server on the example repository, with
# the OpenAI-compatible API on port 9000 (for the example LLM, smollm2) unless the
# arguments choose another. Extra arguments go to nereid (e.g. --http-port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
openai=(--openai-port 9000)
for arg in "$@"; do
  case "$arg" in --openai-port|--openai-port=*) openai=() ;; esac
done
exec target/release/nereid --model-repository examples/models "${openai[@]}" "$@"
