#!/usr/bin/env bash
# run_triton_python_api_qa.sh - Triton's own L0_python_api QA suite (qa/L0_python_api of
# triton-inference-server/server) against Nereid's libtritonserver.so, inside the Python
# 3.12 / Debian 13 root of scripts/python_packages_env.sh, and a pass/fail table per test.
#
# scripts/test_python_packages.sh runs it (with NEREID_QA_UPSTREAM_XFAIL=1, about two
# minutes); the whole run, upstream xfails included, takes about three and a half.
#
# Usage: scripts/run_triton_python_api_qa.sh [FILE...]
#   FILE  test files to run (default: all four, in test.sh's order): test_binding.py,
#         test_api.py, test_kserve.py, test_logging_callback.py
#
# As the suite's test.sh does, each file runs in its own pytest process, with
# pytest-asyncio 0.23.8. The files come from Triton's repositories and are never kept in
# this checkout: they are copied into a fresh work folder (NEREID_QA_WORK) from
#   server: qa/L0_python_api/{test_kserve.py,testing_utils.py,test_model_repository}
#   core:   python/test/{test_binding.py,test_api.py,test_api_models,test_logging_callback.py}
# and a file the core source lacks (test_logging_callback.py is newer than some copies)
# is taken from NEREID_TRITON_CORE_TESTS/python/test when there. The models are Triton's
# python-backend models, served by the root's /opt/tritonserver/backends/python (Triton
# 2.51's python backend, tritonserver.Options' default backend directory).
#
# Tests marked xfail(run=False) upstream (test_kserve.py's TestKServe: "Python model may
# not load after gRPC import"; test_api.py's test_stop) are run anyway (pytest
# --runxfail); their failures are reported as "FAILED (upstream xfail)" and do not fail
# the run, since Triton's CI does not run them either. NEREID_QA_UPSTREAM_XFAIL=1 leaves
# them unrun. Each pytest runs in a network namespace of its own (loopback only):
# test_kserve.py uses the fixed ports 8000-8002 and 8005. tests/python_packages/
# triton_qa_plugin.py marks the upstream xfails and checks that the library loaded is
# the one given. GRPC_ENABLE_FORK_SUPPORT=0: once grpc is imported, its fork handlers
# abort the process ("Check failed: is_forking != was_forking") when the python backend
# forks the stubs of two models loading at once, the upstream xfail's "Python model may
# not load after gRPC import".
#
# Tests that fail for a reason listed in KNOWN_FAILURES below are reported as known
# failures and do not fail the run (NEREID_QA_STRICT=1: they do); one that passes is
# reported so that it is taken off the list. Tests that need a GPU (CuPy, torch with
# CUDA) skip themselves, as upstream, with the reason in the table.
#
# Environment (all optional):
#   NEREID_LIBTRITONSERVER_DIR  folder with the libtritonserver.so to test (default: built
#                               with `cargo build --release --locked -p nereid-triton-abi`)
#   NEREID_TRITON_SERVER_SRC    bare git directory or checkout of Triton's server repository
#                               (default /work/.mirror/triton-inference-server+server/repo)
#   NEREID_TRITON_CORE_SRC      the same for Triton's core repository
#                               (default /work/.mirror/triton-inference-server+core/repo)
#   NEREID_TRITON_CORE_TESTS    folder holding python/test files newer than the core source
#                               (default $NEREID_CACHE/triton-core-python-test)
#   NEREID_CACHE                cache root (default /var/cache/nereid); pytest-asyncio is
#                               installed under $NEREID_CACHE/triton-python-api-qa
#   NEREID_QA_WORK              work folder: tests, logs, junit files (default: a new
#                               folder under /tmp)
#   NEREID_QA_TIMEOUT           seconds per test file (default 600)
#   CI=true                     a missing dependency fails instead of skipping
#
# Exit status: 0 when every test passed, skipped itself or failed as listed; 1 otherwise;
# 0 with the reason when the environment cannot be built (1 under CI=true).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

log() { echo "run_triton_python_api_qa: $*" >&2; }
unavailable() {
  log "UNAVAILABLE: $*"
  if [ "${CI:-}" = true ]; then log "FAILED: CI=true"; exit 1; fi
  exit 0
}

# file::test id (pytest's, without the parameters' brackets when they are given here)
# -> why it fails on Nereid. Keep each reason short: it is printed in the table.
# (none at present: every test of the four files passes on Nereid)
KNOWN_FAILURES=()

FILES=("$@")
[ ${#FILES[@]} -gt 0 ] || FILES=(test_binding.py test_api.py test_kserve.py test_logging_callback.py)

CACHE=${NEREID_CACHE:-/var/cache/nereid}
QA_CACHE=$CACHE/triton-python-api-qa
SERVER_SRC=${NEREID_TRITON_SERVER_SRC:-/work/.mirror/triton-inference-server+server/repo}
CORE_SRC=${NEREID_TRITON_CORE_SRC:-/work/.mirror/triton-inference-server+core/repo}
CORE_TESTS=${NEREID_TRITON_CORE_TESTS:-$CACHE/triton-core-python-test}
TIMEOUT=${NEREID_QA_TIMEOUT:-600}

# 1. The library.
if [ -n "${NEREID_LIBTRITONSERVER_DIR:-}" ]; then
  lib_dir=$(cd "$NEREID_LIBTRITONSERVER_DIR" && pwd)
else
  log "building libtritonserver.so (cargo build --release --locked -p nereid-triton-abi)"
  cargo build --release --locked -p nereid-triton-abi || exit 1
  lib_dir=$(cd "${CARGO_TARGET_DIR:-target}/release" && pwd)
fi
[ -f "$lib_dir/libtritonserver.so" ] || { log "ERROR: no libtritonserver.so in $lib_dir"; exit 1; }

# 2. The environment.
status=0
scripts/python_packages_env.sh setup || status=$?
if [ "$status" -eq 77 ]; then unavailable "the Python 3.12 environment cannot be built (see above)"; fi
[ "$status" -eq 0 ] || { log "ERROR: scripts/python_packages_env.sh setup failed (status $status)"; exit 1; }

# 3. pytest-asyncio, as test.sh installs it (a pure-Python wheel: the host's pip fetches it).
SITE=$QA_CACHE/site-pytest-asyncio-0.23.8
if [ ! -f "$SITE/.ready" ]; then
  log "installing pytest-asyncio==0.23.8 into $SITE"
  rm -rf "$SITE" && mkdir -p "$SITE"
  if timeout 300 python3 -m pip install -q --disable-pip-version-check --no-deps \
      --only-binary=:all: --target "$SITE" pytest-asyncio==0.23.8 >&2; then
    touch "$SITE/.ready"
  else
    rm -rf "$SITE"
    unavailable "cannot install pytest-asyncio==0.23.8 (network?)"
  fi
fi

# 4. The tests, copied from Triton's repositories into the work folder.
WORK=${NEREID_QA_WORK:-$(mktemp -d /tmp/nereid-python-api-qa.XXXXXX)}
mkdir -p "$WORK" && WORK=$(cd "$WORK" && pwd)
TESTS=$WORK/L0_python_api
rm -rf "$TESTS" && mkdir -p "$TESTS"
SOURCES=$TESTS/SOURCES

# copy_from SRC TREE_PATH NAME...: TREE_PATH/NAME of a bare repository's HEAD or a checkout.
copy_from() {
  local src=$1 dir=$2 name rev
  shift 2
  [ -d "$src" ] || return 1
  if rev=$(git -C "$src" rev-parse -q --verify HEAD 2>/dev/null) &&
      git -C "$src" rev-parse -q --verify "HEAD:$dir" >/dev/null 2>&1; then
    for name in "$@"; do
      git -C "$src" rev-parse -q --verify "HEAD:$dir/$name" >/dev/null 2>&1 || continue
      git -C "$src" archive HEAD "$dir/$name" | tar -C "$TESTS" -xf - --strip-components=$(($(tr -cd / <<<"$dir" | wc -c) + 1))
      echo "$name: $(basename "$src") $rev $dir/$name" >>"$SOURCES"
    done
  else
    for name in "$@"; do
      [ -e "$src/$dir/$name" ] || continue
      cp -r "$src/$dir/$name" "$TESTS/"
      echo "$name: $src/$dir/$name" >>"$SOURCES"
    done
  fi
}
copy_from "$SERVER_SRC" qa/L0_python_api test_kserve.py testing_utils.py test_model_repository
copy_from "$CORE_SRC" python/test test_binding.py test_api.py test_api_models test_logging_callback.py
for name in test_binding.py test_api.py test_api_models test_logging_callback.py; do
  if [ ! -e "$TESTS/$name" ] && [ -e "$CORE_TESTS/python/test/$name" ]; then
    cp -r "$CORE_TESTS/python/test/$name" "$TESTS/"
    echo "$name: $CORE_TESTS/python/test/$name ($(head -1 "$CORE_TESTS/SOURCE" 2>/dev/null || echo 'no SOURCE'))" >>"$SOURCES"
  fi
done
log "work folder $WORK; test sources:"
sed 's/^/  /' "$SOURCES" >&2

# 5. Run each file in its own pytest process inside the root.
export NEREID_ENV_BINDS="$lib_dir:$WORK:$SITE${NEREID_ENV_BINDS:+:$NEREID_ENV_BINDS}"
missing=()
for file in "${FILES[@]}"; do
  base=${file%.py}
  if [ ! -f "$TESTS/$file" ]; then
    missing+=("$file")
    continue
  fi
  args=(-p no:cacheprovider -p triton_qa_plugin --junitxml="$WORK/$base.xml" -rA)
  [ "${NEREID_QA_UPSTREAM_XFAIL:-}" = 1 ] || args+=(--runxfail)
  log "pytest $file (log $WORK/$base.log)"
  (cd "$TESTS" && timeout --kill-after=30 "$TIMEOUT" \
    unshare --net -- sh -c 'ip link set lo up && exec "$@"' net \
    "$ROOT/scripts/python_packages_env.sh" run \
    env GRPC_ENABLE_FORK_SUPPORT=0 LD_LIBRARY_PATH="$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NEREID_LIBTRITONSERVER_DIR="$lib_dir" \
    PYTHONPATH="$SITE:$ROOT/tests/python_packages" python -m pytest "${args[@]}" "$file") >"$WORK/$base.log" 2>&1
  echo "pytest $file: exit $?" >>"$WORK/$base.log"
  tail -1 "$WORK/$base.log" >&2
done

# 6. The table, from the junit files.
known=$(printf '%s\n' "${KNOWN_FAILURES[@]}")
python3 - "$WORK" "$known" "${CI:-}" "${NEREID_QA_STRICT:-}" "${missing[@]}" <<'PY'
import os, re, sys
import xml.etree.ElementTree as ET

work, known_text, ci, strict = sys.argv[1:5]
missing = sys.argv[5:]
known = dict(line.split("|", 1) for line in known_text.splitlines() if "|" in line)
rows, bad = [], 0


def short(text):
    text = " ".join((text or "").split())
    return text[:150] + ("..." if len(text) > 150 else "")


for name in sorted(os.listdir(work)):
    if not name.endswith(".xml"):
        continue
    file = name[:-4] + ".py"
    log = os.path.join(work, name[:-4] + ".log")
    for case in ET.parse(os.path.join(work, name)).iter("testcase"):
        cls = case.get("classname", "").split(".")[-1]
        test = f"{file}::{cls}::{case.get('name')}" if cls and cls != file[:-3] else f"{file}::{case.get('name')}"
        bare = re.sub(r"\[.*\]$", "", test)
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        upstream_xfail = any(p.get("name") == "upstream_xfail" for p in case.iter("property"))
        if failure is not None:
            why = short(failure.get("message"))
            if upstream_xfail:
                rows.append((test, "FAILED (upstream xfail)", why))
            elif bare in known or test in known:
                reason = known.get(test) or known.get(bare)
                rows.append((test, "KNOWN FAILURE", f"{reason} ({why})"))
                bad += strict == "1"
            else:
                rows.append((test, "FAILED", why))
                bad += 1
        elif skipped is not None:
            kind = "XFAIL (not run)" if skipped.get("type") == "pytest.xfail" else "SKIPPED"
            rows.append((test, kind, short(skipped.get("message"))))
        else:
            if bare in known or test in known:
                rows.append((test, "PASSED", "listed as a known failure: take it off KNOWN_FAILURES"))
            else:
                rows.append((test, "PASSED", "marked xfail upstream" if upstream_xfail else ""))
    # A pytest that died before writing results (a crash) leaves its log's tail.
    with open(log, errors="replace") as f:
        tail = f.read().splitlines()[-1:]
    if tail and not re.search(r"exit [015]$", tail[0]):
        rows.append((file, "FAILED", f"pytest did not finish cleanly: {tail[0]} (see {log})"))
        bad += 1
for log in sorted(os.listdir(work)):
    if log.endswith(".log") and not os.path.exists(os.path.join(work, log[:-4] + ".xml")):
        rows.append((log[:-4] + ".py", "FAILED", f"no results: see {os.path.join(work, log)}"))
        bad += 1
for file in missing:
    rows.append((file, "CANNOT RUN", "not in the Triton sources given (see the script's header)"))
    bad += ci == "true"

width = max([len(r[0]) for r in rows] + [4])
print(f"\n{'test':<{width}}  {'result':<23}  why")
print(f"{'-' * width}  {'-' * 23}  ---")
for test, result, why in rows:
    print(f"{test:<{width}}  {result:<23}  {why}")
counts = {}
for _, result, _ in rows:
    counts[result] = counts.get(result, 0) + 1
print("\n" + ", ".join(f"{n} {r.lower()}" for r, n in sorted(counts.items())) + f"; logs in {work}")
sys.exit(1 if bad else 0)
PY
