#!/usr/bin/env bash
# The container image test: builds the image offline (deploy/image/build-offline.sh)
# and runs it under podman, driven by tritonclient (tests/image). scripts/test.sh runs
# it last (about 1.5 minutes, most of it bootstrapping the base system); it needs root
# and a Debian mirror.
#
#   scripts/test_image.sh [NEREID_BIN]
#
# Without NEREID_BIN, scripts/setup.sh first prepares .venv, the example models and
# the release build. The image is tagged localhost/nereid:latest. Run it as root on a
# machine where podman can start containers: a VM or bare metal, or a --privileged
# container. Where podman cannot, the tests skip and print what podman answered.
set -euo pipefail
binary=${1:+$(realpath -m "$1")}
cd "$(dirname "$0")/.."

# With IMAGE_BUILD_OPTIONAL=1 (scripts/test.sh), a machine that cannot build the image
# (no root, no mirror) skips the image tests with the reason instead of failing.
cannot() {
  if [ "${IMAGE_BUILD_OPTIONAL:-0}" = 1 ]; then
    echo "test_image: SKIPPED: $*" >&2
    exit 0
  fi
  echo "test_image: $*" >&2
  exit 1
}

if [ -z "$binary" ]; then
  scripts/setup.sh
  binary=target/release/nereid
fi

# runc: where crun cannot start containers (see RUN_OPTION_SETS in tests/image).
missing=()
for tool in debootstrap buildah podman runc; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "test_image: installing ${missing[*]}" >&2
  { apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; } ||
    cannot "${missing[*]} could not be installed"
fi

deploy/image/build-offline.sh "$binary" || cannot "the image could not be built (see above)"
.venv/bin/python -m pytest -q -rs tests/image
