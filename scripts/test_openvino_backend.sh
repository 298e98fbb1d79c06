#!/usr/bin/env bash
# OpenVINO IR models through Triton's openvino backend hosted by the nereid binary: builds
# the backend (scripts/build_openvino_backend.sh, cached) and runs tests/openvino with
# tritonclient; the tests write their IR models themselves (tests/openvino/
# make_openvino_models.py, standard library only), so nothing beyond the cached wheel is
# downloaded.
#   scripts/test_openvino_backend.sh [pytest args]
# NEREID_BIN: the binary (default target/release/nereid). Cache: /var/cache/nereid.
# NEREID_BACKENDS: the backend directory to build into (default $NEREID_CACHE/backends,
# shared with scripts/test_pytorch_backend.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${NEREID_CACHE:-/var/cache/nereid}
BACKENDS=${NEREID_BACKENDS:-$CACHE/backends}
NEREID_OPENVINO_CACHE=${NEREID_OPENVINO_CACHE:-$CACHE/openvino} \
  scripts/build_openvino_backend.sh "$BACKENDS"
NEREID_OPENVINO_BACKENDS=$BACKENDS \
  NEREID_BIN=${NEREID_BIN:-$PWD/target/release/nereid} .venv/bin/python -m pytest -q tests/openvino "$@"
