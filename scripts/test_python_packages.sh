#!/usr/bin/env bash
# Triton's own Python packages (tritonserver and tritonfrontend 2.73, Triton's OpenAI
# frontend) against Nereid's libtritonserver.so: tests/python_packages, run inside the
# Python 3.12 / Debian 13 root of scripts/python_packages_env.sh (built once into
# ${NEREID_CACHE:-/var/cache/nereid}/trixie-py312, quick when cached).
#
# Without arguments, Triton's own L0_python_api suite follows
# (scripts/run_triton_python_api_qa.sh, as Triton's CI runs it).
#
# Usage: scripts/test_python_packages.sh [PYTEST_ARGS...]   (no tests/... path: the whole folder)
#   NEREID_LIBTRITONSERVER_DIR  folder with the libtritonserver.so to test (default: built
#                               here with `cargo build --release --locked -p nereid-triton-abi`
#                               into target/release)
#   CI=true                     an environment that cannot be built fails instead of skipping
#
# When the environment cannot be built (no root, no debootstrap, no CPython 3.12, no
# network for the first build) the reason is printed and the script exits 0, or 1 under
# CI=true; the export check (tests/python_packages/test_exports.py) still runs on the host.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "test_python_packages: $*" >&2; }

if [ -n "${NEREID_LIBTRITONSERVER_DIR:-}" ]; then
  lib_dir=$(cd "$NEREID_LIBTRITONSERVER_DIR" && pwd)
else
  log "building libtritonserver.so (cargo build --release --locked -p nereid-triton-abi)"
  cargo build --release --locked -p nereid-triton-abi
  lib_dir=$(cd "${CARGO_TARGET_DIR:-target}/release" && pwd)
fi
[ -f "$lib_dir/libtritonserver.so" ] || { log "ERROR: no libtritonserver.so in $lib_dir"; exit 1; }
log "library: $lib_dir/libtritonserver.so"

status=0
scripts/python_packages_env.sh setup || status=$?
if [ "$status" -ne 0 ]; then
  if [ "$status" -ne 77 ]; then
    log "ERROR: scripts/python_packages_env.sh setup failed (status $status)"
    exit 1
  fi
  # Without Python 3.12 the symbol check still runs here (it reads the wheels with nm).
  if [ -x .venv/bin/python ]; then
    log "the environment cannot be built: running only test_exports.py on the host"
    NEREID_LIBTRITONSERVER_DIR=$lib_dir .venv/bin/python -m pytest -q -p no:cacheprovider \
      tests/python_packages/test_exports.py
  fi
  if [ "${CI:-}" = true ]; then
    log "FAILED: the Python 3.12 environment cannot be built (see above); CI=true"
    exit 1
  fi
  log "SKIPPED: the Python 3.12 environment cannot be built (see above)"
  exit 0
fi

log "pytest tests/python_packages inside the Python 3.12 root"
# The library's folder is bound into the root at its own path (the checkout and /tmp are).
export NEREID_ENV_BINDS="$lib_dir${NEREID_ENV_BINDS:+:$NEREID_ENV_BINDS}"
# Arguments naming no test path run the whole folder (e.g. `-k openai`).
paths=(tests/python_packages)
for arg in "$@"; do case $arg in tests/*) paths=() ;; esac; done
status=0
timeout --kill-after=30 1200 scripts/python_packages_env.sh run \
  env LD_LIBRARY_PATH="$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NEREID_LIBTRITONSERVER_DIR="$lib_dir" \
  python -m pytest -q -p no:cacheprovider "${paths[@]}" "$@" || status=$?

# Triton's own L0_python_api suite on the same library, as Triton's CI runs it (its
# xfail tests not run; about two minutes). Only for a whole run (no pytest arguments);
# NEREID_TRITON_PYTHON_API_QA=0 leaves it out.
if [ $# -eq 0 ] && [ "${NEREID_TRITON_PYTHON_API_QA:-1}" != 0 ]; then
  log "Triton's L0_python_api (scripts/run_triton_python_api_qa.sh)"
  NEREID_LIBTRITONSERVER_DIR=$lib_dir NEREID_QA_UPSTREAM_XFAIL=1 \
    scripts/run_triton_python_api_qa.sh || status=1
fi
exit "$status"
