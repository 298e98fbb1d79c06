#!/usr/bin/env bash
# The whole test suite: Rust unit and integration tests, then the tritonclient
# conformance suite against the real nereid binary. Everything is compiled once, in the
# `suite` profile (release without LTO; .ci/run's clippy uses it too, so llama.cpp's C++
# build is shared): the binary every later stage runs is the one `cargo test` builds,
# target/suite/nereid.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage is announced with the clock and the seconds since the start, so a slow CI
# run shows where its time went.
stage() { echo "test: [$(date -u +%T) +${SECONDS}s] $*" >&2; }

NEREID_SETUP_BUILD=0 scripts/setup.sh
bin_dir="$PWD/target/suite"

# The documentation site: mdbook build of docs/, then every link and repository path of
# README.md and docs/src checked (scripts/check_links.py).
stage "docs (mdbook build + link check)"
scripts/check_docs.sh

# The redis cache tests start real redis-server processes (Debian's package).
if ! command -v redis-server >/dev/null; then
  echo "test: installing redis-server" >&2
  apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
fi

# The scale-out tests (tests/python/test_scale_out.py) put Debian's HAProxy in front of replicas.
if ! command -v haproxy >/dev/null; then
  echo "test: installing haproxy" >&2
  apt-get update -qq && apt-get install -y -qq haproxy >/dev/null
fi

# The gRPC TLS tests (tests/python/test_grpc_tls.py) make their certificates with openssl.
if ! command -v openssl >/dev/null; then
  echo "test: installing openssl" >&2
  apt-get update -qq && apt-get install -y -qq openssl >/dev/null
fi

# The cloud repository tests (tests/python/test_cloud_repository.py) run Microsoft's
# Azure Storage emulator, Azurite, from npm.
if [ ! -x .cache/azurite/node_modules/.bin/azurite-blob ]; then
  if ! command -v npm >/dev/null; then
    echo "test: installing nodejs and npm" >&2
    apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
  fi
  echo "test: installing azurite" >&2
  npm install --silent --no-audit --no-fund --prefix .cache/azurite azurite@3 >/dev/null
fi

# The C++ backend test (tests/python/test_cpp_backend.py) builds its backend with c++.
if ! command -v c++ >/dev/null; then
  echo "test: installing g++" >&2
  apt-get update -qq && apt-get install -y -qq g++ >/dev/null
fi

# The cache plugin tests relink Triton's own plugin to need libtritonserver.so.
if ! command -v patchelf >/dev/null; then
  echo "test: installing patchelf" >&2
  apt-get update -qq && apt-get install -y -qq patchelf >/dev/null
fi

# Triton's python backend stub (tests/python/test_python_backend.py) embeds the
# distribution's libpython of the tests' Python version.
pyver=$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if ! ldconfig -p | grep -q "libpython$pyver.so.1.0"; then
  echo "test: installing libpython$pyver for the python backend stub" >&2
  apt-get install -y -qq "libpython$pyver" >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq "libpython$pyver" >/dev/null; } ||
    echo "test: libpython$pyver is not available; the python backend tests will skip" >&2
fi

stage "cargo test (suite profile: release without LTO)"
cargo test --profile suite --locked --workspace
# The python tests relink Triton's own cache plugin against the libtritonserver.so beside
# the nereid binary; `cargo test` built it (with the workspace's features) into deps/.
cp "$bin_dir/deps/libtritonserver.so" "$bin_dir/libtritonserver.so"

stage "tritonclient conformance suite"
NEREID_BIN="$bin_dir/nereid" .venv/bin/python -m pytest -q tests/python

# TorchScript models through Triton's own pytorch backend, built from source against
# PyPI's torch wheel (scripts/build_pytorch_backend.sh; the wheel, sources and the built
# backend are cached under /var/cache/nereid, so only a cold machine pays the ~4 minutes).
for pkg in cmake:cmake rapidjson-dev:/usr/include/rapidjson/document.h \
  googletest:/usr/src/googletest/CMakeLists.txt unzip:unzip python3-dev:/usr/include/python3*/Python.h; do
  probe=${pkg#*:}
  # shellcheck disable=SC2086 # the probe may be a glob
  if ! command -v "$probe" >/dev/null && ! ls $probe >/dev/null 2>&1; then
    echo "test: installing ${pkg%%:*}" >&2
    apt-get update -qq && apt-get install -y -qq "${pkg%%:*}" >/dev/null
  fi
done
stage "TorchScript models through Triton's pytorch backend"
NEREID_BIN="$bin_dir/nereid" scripts/test_pytorch_backend.sh

# OpenVINO IR models through Triton's own openvino backend, built from source against
# PyPI's openvino wheel (scripts/build_openvino_backend.sh, cached like the pytorch one).
stage "OpenVINO models through Triton's openvino backend"
NEREID_BIN="$bin_dir/nereid" scripts/test_openvino_backend.sh

# Triton's own Python packages (tritonserver, tritonfrontend 2.73: Python 3.12, glibc 2.38)
# on the libtritonserver.so copied above, inside a Debian 13 root cached outside the clone.
stage "Triton's Python packages on libtritonserver.so"
NEREID_LIBTRITONSERVER_DIR="$bin_dir" scripts/test_python_packages.sh

# Two minutes of mixed, checked traffic while the repository changes, with the servers'
# RSS, fds, threads, /dev/shm, pending requests and live sequences held to the bounds in
# scripts/soak.py (after the python tests, which fetch Triton's python backend it uses).
stage "soak (2 minutes)"
# Without the python model's load/unload cycles: see PYTHON_RELOADS in scripts/soak.py.
NEREID_SOAK_PYTHON_RELOADS=0 NEREID_BIN="$bin_dir/nereid" scripts/soak.sh 120

# The container image: built offline from Debian packages and run under podman.
# NEREID_SKIP_IMAGE=1 leaves it out (e.g. without root).
if [ "${NEREID_SKIP_IMAGE:-0}" = 1 ]; then
  echo "test: container image test skipped (NEREID_SKIP_IMAGE=1)" >&2
else
  stage "container image"
  IMAGE_BUILD_OPTIONAL=1 scripts/test_image.sh "$bin_dir/nereid"
fi
stage "done"
