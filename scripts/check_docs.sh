#!/usr/bin/env bash
# The documentation site (docs/, an mdBook): build it, then check every link and repository
# path of README.md and docs/src/**/*.md with scripts/check_links.py. mdbook is installed from
# crates.io once, outside the clone (like the other caches under /var/cache/nereid), with the
# default features off: no `serve`/`watch` dependencies, and no search index.
#
# Usage: scripts/check_docs.sh        (the site is written to docs/book, which git ignores)
set -euo pipefail
cd "$(dirname "$0")/.."

MDBOOK_VERSION=0.4.52
MDBOOK_ROOT=${NEREID_MDBOOK_ROOT:-/var/cache/nereid/mdbook}
mdbook="$MDBOOK_ROOT/bin/mdbook"

if ! { [ -x "$mdbook" ] && "$mdbook" --version 2>/dev/null | grep -qx "mdbook v$MDBOOK_VERSION"; }; then
  echo "check_docs: installing mdbook $MDBOOK_VERSION into $MDBOOK_ROOT (a few minutes, once)" >&2
  CARGO_TARGET_DIR=${NEREID_MDBOOK_BUILD_DIR:-/var/cache/nereid/mdbook-build} \
    cargo install mdbook --locked --no-default-features --version "$MDBOOK_VERSION" \
    --root "$MDBOOK_ROOT" --quiet
fi

# A warning (an include that is not found, a page missing from SUMMARY.md) fails the check too.
if ! out=$("$mdbook" build docs 2>&1) || grep -qE '\[(WARN|ERROR)\]' <<<"$out"; then
  echo "$out" >&2
  echo "check_docs: mdbook build docs failed" >&2
  exit 1
fi
python3 scripts/check_links.py
