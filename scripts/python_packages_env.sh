#!/usr/bin/env bash
# python_packages_env.sh - a Python 3.12 / glibc >= 2.38 environment for Triton's own
# Python packages (tritonserver, tritonfrontend 2.73: cp312 manylinux_2_39 wheels only),
# on a Debian 12 host (glibc 2.36, Python 3.11).
#
# Builds once, into a cache folder outside the checkout:
#   a minimal Debian 13 "trixie" root (debootstrap --variant=minbase) with the
#   libraries CPython needs, the host's CPython 3.12 (built --enable-shared) copied in
#   at the same absolute path, a virtualenv in the root (VENV below) with the pinned
#   tests/python_packages/requirements.txt (numpy<2, pytest, tritonserver,
#   tritonfrontend, tritonclient[all], requests, the OpenAI frontend's requirements),
#   and Triton 2.51's python backend with its Python 3.12 stub (nvidia-pytriton 0.7.0
#   wheel), also linked as /opt/tritonserver/backends. Triton's OpenAI frontend source
#   (python/openai of the server repository) is copied into the cache when a copy of
#   the repository is found.
#
# Usage:
#   scripts/python_packages_env.sh setup         build what is missing (quick when cached)
#   scripts/python_packages_env.sh run CMD...    setup, then CMD inside the root
#   scripts/python_packages_env.sh path          print the root's path
#
# `run` executes CMD in a private mount namespace (unshare --mount --propagation
# private) chrooted into the root, with the checkout, /dev, /dev/shm, /proc, /sys, /tmp
# (and NEREID_ENV_BINDS, colon separated) bind-mounted at the same absolute paths; the
# mounts vanish when CMD exits. The working directory and the environment are kept;
# the venv's bin folder comes first on PATH.
#
# Environment (all optional):
#   NEREID_CACHE         cache root (default /var/cache/nereid); the environment is
#                        $NEREID_CACHE/trixie-py312
#   NEREID_PY312         CPython 3.12 prefix (default /root/.pyenv/versions/3.12.1)
#   NEREID_DEBIAN_MIRROR Debian mirror for debootstrap (default: the host apt's mirror)
#   NEREID_TRITON_SERVER_SRC  a bare git directory or checkout of Triton's server
#                        repository (default /work/.mirror/triton-inference-server+server/repo)
#   NEREID_ENV_BINDS     more host folders to bind at the same path (colon separated)
#
# Exit status: 0 ready / CMD's status; 77 when the environment cannot be built on this
# machine (no root, no debootstrap, no CPython 3.12, a download failed), with the reason
# on stderr; 1 for any other failure.
set -Eeuo pipefail
trap 'echo "[python_packages_env] ERROR: \"$BASH_COMMAND\" failed (status $?, line $LINENO)" >&2' ERR

# Bump to rebuild the root (ROOT_PACKAGES) or the venv.
ROOT_VERSION=1
VENV_VERSION=1
SUITE=trixie
ROOT_PACKAGES=libffi8,libssl3t64,zlib1g,libbz2-1.0,liblzma5,libsqlite3-0,libreadline8t64,libncursesw6,libtinfo6,libexpat1,libuuid1,libnsl2,libtirpc3t64,libstdc++6,libgcc-s1,ca-certificates,binutils
# The venv's requirements, all pinned: tests/python_packages/requirements.txt. The
# wheels of tritonserver/tritonfrontend are taken from $NEREID_CACHE/wheels312 when
# present there, else from PyPI.

HERE=$(cd "$(dirname "$0")/.." && pwd)
REQUIREMENTS=$HERE/tests/python_packages/requirements.txt
CACHE=${NEREID_CACHE:-/var/cache/nereid}
ENV_DIR=$CACHE/trixie-py312
ROOTFS=$ENV_DIR/rootfs
PY312=${NEREID_PY312:-/root/.pyenv/versions/3.12.1}
VENV=/opt/nereid-py312-venv
OPENAI_DEST=$ENV_DIR/openai
# Triton 2.51's python backend (nvidia-pytriton 0.7.0 wheel) with its Python 3.12 stub,
# unpacked inside the root.
PYTRITON_WHEEL=nvidia_pytriton-0.7.0-py3-none-manylinux_2_35_x86_64.whl
PYTRITON_DIR=/opt/nereid-pytriton
SERVER_SRC=${NEREID_TRITON_SERVER_SRC:-/work/.mirror/triton-inference-server+server/repo}
LOCK=$CACHE/.trixie-py312.lock

log() { echo "[python_packages_env] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
unavailable() { log "UNAVAILABLE: $*"; exit 77; }

check_prerequisites() {
  [[ $(id -u) -eq 0 ]] || unavailable "needs root (debootstrap, chroot and mounts)"
  [[ -x $PY312/bin/python3.12 && -e $PY312/lib/libpython3.12.so.1.0 ]] ||
    unavailable "no CPython 3.12 with its shared library at $PY312 (set NEREID_PY312)"
  command -v unshare >/dev/null && command -v chroot >/dev/null ||
    unavailable "unshare/chroot (util-linux, coreutils) missing"
}

ensure_debootstrap() {
  command -v debootstrap >/dev/null && return 0
  log "installing debootstrap with apt-get"
  { timeout 600 apt-get install -y -qq debootstrap >/dev/null 2>&1 ||
    { timeout 300 apt-get update -qq && timeout 600 apt-get install -y -qq debootstrap >/dev/null; }; } ||
    unavailable "debootstrap is not installed and apt-get could not install it"
  [[ -e /usr/share/debootstrap/scripts/$SUITE ]] || unavailable "this debootstrap does not know $SUITE"
}

host_mirror() {
  if [[ -n ${NEREID_DEBIAN_MIRROR:-} ]]; then echo "$NEREID_DEBIAN_MIRROR"; return; fi
  grep -hoE '^(URIs:|deb) +[a-z]+://[^ ]+/debian/?( |$)' \
    /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
    grep -oE '[a-z]+://[^ ]+' | head -1 || true
}

# 1. The Debian root.
build_root() {
  local stamp=$ROOTFS/.nereid-root-v$ROOT_VERSION
  [[ -f $stamp ]] && return 0
  ensure_debootstrap
  if [[ -e $ROOTFS ]]; then
    log "removing the incomplete or outdated root $ROOTFS"
    [[ $ROOTFS == */trixie-py312/rootfs ]] || die "refusing to remove $ROOTFS"
    rm -rf --one-file-system "$ROOTFS"
  fi
  rm -f "$ENV_DIR"/.venv-stamp
  local mirror
  mirror=$(host_mirror)
  log "step 1/5: debootstrap $SUITE (minbase) into $ROOTFS${mirror:+ from $mirror} (a few minutes; log $ENV_DIR/debootstrap.log)"
  mkdir -p "$ENV_DIR"
  timeout 1800 debootstrap --variant=minbase --include="$ROOT_PACKAGES" \
    "$SUITE" "$ROOTFS" ${mirror:+"$mirror"} >"$ENV_DIR/debootstrap.log" 2>&1 || {
      tail -5 "$ENV_DIR/debootstrap.log" >&2
      unavailable "debootstrap $SUITE failed (network or mirror), see $ENV_DIR/debootstrap.log"
    }
  rm -rf --one-file-system "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* || true
  touch "$stamp"
}

# 2. CPython 3.12 at the same absolute path, its lib folder known to ld.so (the python
#    backend stub needs libpython3.12.so.1.0).
install_python() {
  local stamp=$ROOTFS/.nereid-python-$(basename "$PY312")
  [[ -f $stamp && -x $ROOTFS$PY312/bin/python3.12 ]] && return 0
  log "step 2/5: copying CPython $(basename "$PY312") into the root at $PY312"
  rm -rf --one-file-system "$ROOTFS$PY312"
  mkdir -p "$ROOTFS$PY312"
  # Without the test suite and the host's site-packages: a clean interpreter (venv
  # bootstraps pip from ensurepip).
  tar -C "$PY312" --exclude=./lib/python3.12/test --exclude='./lib/python3.12/site-packages/*' \
    --exclude='__pycache__' -cf - . | tar -C "$ROOTFS$PY312" -xf -
  echo "$PY312/lib" >"$ROOTFS/etc/ld.so.conf.d/nereid-python312.conf"
  chroot "$ROOTFS" /sbin/ldconfig
  chroot "$ROOTFS" "$PY312/bin/python3.12" -c 'import ssl, ctypes, sqlite3, lzma, bz2, zlib, readline, uuid' ||
    die "CPython 3.12 does not run inside the root (missing libraries?)"
  rm -f "$ENV_DIR"/.venv-stamp
  touch "$stamp"
}

# 3. The virtualenv, made and filled by pip inside the root (DNS and the host's CA
#    bundle copied in; the host's pip `cert` is honoured).
venv_key() {
  local w
  { echo "$VENV_VERSION $PY312"; cat "$REQUIREMENTS"
    for w in "$CACHE"/wheels312/*.whl; do if [[ -e $w ]]; then basename "$w"; fi; done; } |
    sha256sum | cut -c1-16
}

build_venv() {
  local key stamp=$ENV_DIR/.venv-stamp
  key=$(venv_key)
  [[ -f $stamp && $(cat "$stamp") == "$key" && -x $ROOTFS$VENV/bin/python ]] && return 0
  log "step 3/5: virtualenv $VENV in the root with ${REQUIREMENTS#"$HERE"/} (log $ENV_DIR/pip.log)"
  cp -L /etc/resolv.conf "$ROOTFS/etc/resolv.conf" 2>/dev/null || true
  local cert=${PIP_CERT:-}
  [[ -z $cert ]] && cert=$(sed -n 's/^ *cert *= *//p' /etc/pip.conf 2>/dev/null | head -1)
  [[ -z $cert || ! -f $cert ]] && cert=/etc/ssl/certs/ca-certificates.crt
  cp -L "$cert" "$ROOTFS/etc/ssl/certs/nereid-host-ca-bundle.crt"
  mkdir -p "$ROOTFS/opt/nereid-wheels"
  rm -f "$ROOTFS"/opt/nereid-wheels/*.whl
  cp "$CACHE"/wheels312/*.whl "$ROOTFS/opt/nereid-wheels/" 2>/dev/null || true
  cp "$REQUIREMENTS" "$ROOTFS/opt/nereid-wheels/requirements.txt"
  rm -rf --one-file-system "$ROOTFS$VENV"
  chroot "$ROOTFS" "$PY312/bin/python3.12" -m venv "$VENV" >"$ENV_DIR/pip.log" 2>&1 ||
    { tail -5 "$ENV_DIR/pip.log" >&2; die "python3.12 -m venv failed inside the root"; }
  # The host's CA variables (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, ...) name paths that
  # inside the root hold Debian's bundle: all point at the copy of the host's.
  local ca=/etc/ssl/certs/nereid-host-ca-bundle.crt
  if ! env -u PIP_FIND_LINKS PIP_CERT=$ca SSL_CERT_FILE=$ca REQUESTS_CA_BUNDLE=$ca CURL_CA_BUNDLE=$ca \
      PIP_DISABLE_PIP_VERSION_CHECK=1 HOME=/root timeout 1800 chroot "$ROOTFS" "$VENV/bin/python" -m pip install \
      --progress-bar off --find-links /opt/nereid-wheels -r /opt/nereid-wheels/requirements.txt >>"$ENV_DIR/pip.log" 2>&1; then
    tail -15 "$ENV_DIR/pip.log" >&2
    unavailable "pip install inside the root failed (network, PyPI or a pin), see $ENV_DIR/pip.log"
  fi
  chroot "$ROOTFS" "$VENV/bin/python" -m pip freeze >"$ENV_DIR/freeze.txt" 2>/dev/null || true
  rm -rf --one-file-system "$ROOTFS"/root/.cache/pip
  echo "$key" >"$stamp"
}

# 4. Triton's python backend: libtriton_python.so, its utils and the Python 3.12 stub
#    in <dir>/pytriton/tritonserver/backends/python, the wheel's libraries beside it (the
#    layout its RPATH expects). The wheel is reused from the python suite's cache
#    (tests/python/triton_wheel.py) or downloaded with the host's pip.
install_python_backend() {
  local stamp=$ROOTFS$PYTRITON_DIR/.ready wheel="" c
  [[ -f $stamp ]] && return 0
  for c in "${TRITON_CACHE:-${TMPDIR:-/tmp}/nereid-triton-wheel}/$PYTRITON_WHEEL" \
           "$ENV_DIR/dl/$PYTRITON_WHEEL" "${TMPDIR:-/tmp}/triton-tools/pytriton-0.7.0/dl/$PYTRITON_WHEEL"; do
    [[ -f $c ]] && { wheel=$c; break; }
  done
  if [[ -z $wheel ]]; then
    log "step 4/5: downloading nvidia-pytriton==0.7.0 (Triton's python backend, 55 MB)"
    mkdir -p "$ENV_DIR/dl"
    timeout 600 python3 -m pip download -q --no-deps --only-binary=:all: -d "$ENV_DIR/dl" \
      nvidia-pytriton==0.7.0 >&2 || unavailable "cannot download nvidia-pytriton 0.7.0"
    wheel=$ENV_DIR/dl/$PYTRITON_WHEEL
    [[ -f $wheel ]] || unavailable "pip download left no $PYTRITON_WHEEL"
  fi
  log "step 4/5: unpacking Triton's python backend and its Python 3.12 stub into $PYTRITON_DIR"
  rm -rf --one-file-system "$ROOTFS$PYTRITON_DIR"
  mkdir -p "$ROOTFS$PYTRITON_DIR"
  python3 - "$wheel" "$ROOTFS$PYTRITON_DIR" <<'PY' || die "cannot unpack $wheel"
import os, shutil, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
keep = ("pytriton/tritonserver/backends/python/", "nvidia_pytriton.libs/",
        "pytriton/tritonserver/python_backend_stubs/3.12/")
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        if info.is_dir() or not info.filename.startswith(keep):
            continue
        z.extract(info, dest)
        os.chmod(os.path.join(dest, info.filename), (info.external_attr >> 16) & 0o777 or 0o644)
stub = os.path.join(dest, keep[2], "triton_python_backend_stub")
shutil.copy2(stub, os.path.join(dest, keep[0], "triton_python_backend_stub"))
PY
  chmod 0755 "$ROOTFS$PYTRITON_DIR/pytriton/tritonserver/backends/python/triton_python_backend_stub"
  if chroot "$ROOTFS" ldd "$PYTRITON_DIR/pytriton/tritonserver/backends/python/triton_python_backend_stub" | grep 'not found'; then
    die "the python backend stub misses libraries inside the root"
  fi
  touch "$stamp"
}

# 5. Triton's OpenAI frontend source, copied into the cache (never into the checkout).
copy_openai_frontend() {
  local rev
  if [[ -d $SERVER_SRC ]] && git -C "$SERVER_SRC" rev-parse -q --verify HEAD:python/openai >/dev/null 2>&1; then
    rev=$(git -C "$SERVER_SRC" rev-parse HEAD)
    [[ -f $OPENAI_DEST/.rev && $(cat "$OPENAI_DEST/.rev") == "$rev" ]] && return 0
    log "step 5/5: copying Triton's python/openai (server ${rev:0:12}) into $OPENAI_DEST"
    rm -rf "$OPENAI_DEST.tmp"; mkdir -p "$OPENAI_DEST.tmp"
    git -C "$SERVER_SRC" archive HEAD python/openai | tar -C "$OPENAI_DEST.tmp" -xf - --strip-components=2
    echo "$rev" >"$OPENAI_DEST.tmp/.rev"
    rm -rf "$OPENAI_DEST"; mv "$OPENAI_DEST.tmp" "$OPENAI_DEST"
  elif [[ -d $SERVER_SRC/python/openai ]]; then
    [[ -f $OPENAI_DEST/.rev ]] && return 0
    log "step 5/5: copying Triton's python/openai from $SERVER_SRC into $OPENAI_DEST"
    rm -rf "$OPENAI_DEST"; mkdir -p "$OPENAI_DEST"
    cp -r "$SERVER_SRC/python/openai/." "$OPENAI_DEST/"
    echo checkout >"$OPENAI_DEST/.rev"
  else
    log "step 5/5: no copy of Triton's server repository at $SERVER_SRC: the OpenAI frontend tests will skip"
  fi
}

setup() {
  check_prerequisites
  mkdir -p "$CACHE"
  exec 9>"$LOCK"
  flock -w 3600 9 || die "another setup holds $LOCK"
  build_root
  install_python
  build_venv
  install_python_backend
  # debootstrap writes no /etc/hosts: without it `localhost` resolves only through DNS,
  # which a network namespace of its own (run_triton_python_api_qa.sh) does not have.
  [[ -e $ROOTFS/etc/hosts ]] ||
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$ROOTFS/etc/hosts"
  # Triton's default backend directory (the OpenAI frontend's main.py uses it).
  mkdir -p "$ROOTFS/opt/tritonserver"
  ln -sfn "$PYTRITON_DIR/pytriton/tritonserver/backends" "$ROOTFS/opt/tritonserver/backends"
  copy_openai_frontend
  flock -u 9
  exec 9>&-
}

run_in_root() {
  local binds=("$HERE" /tmp) extra
  if [[ -n ${NEREID_ENV_BINDS:-} ]]; then
    IFS=: read -r -a extra <<<"$NEREID_ENV_BINDS"
    binds+=("${extra[@]}")
  fi
  # The OpenAI frontend copy lives outside the root: bound at its own path too.
  [[ -d $OPENAI_DEST ]] && binds+=("$OPENAI_DEST")
  export PATH="$VENV/bin:$PATH" NEREID_ENV_VENV=$VENV NEREID_ENV_OPENAI=$OPENAI_DEST \
    NEREID_PYTHON_BACKEND_DIR=$PYTRITON_DIR/pytriton/tritonserver/backends
  exec unshare --mount --propagation private -- /bin/bash -c '
    set -e; R=$1; shift
    mount --bind /dev "$R/dev"
    mkdir -p "$R/dev/shm"; mount --bind /dev/shm "$R/dev/shm"
    mount --bind /dev/pts "$R/dev/pts" 2>/dev/null || true
    mount -t proc proc "$R/proc"
    mount --rbind /sys "$R/sys"
    n=$1; shift
    for ((i = 0; i < n; i++)); do
      d=$1; shift
      mkdir -p "$R$d"; mount --bind "$d" "$R$d"
    done
    exec chroot "$R" /bin/sh -c "cd \"\$0\" 2>/dev/null || cd /; exec \"\$@\"" "$PWD" "$@"
  ' run "$ROOTFS" "${#binds[@]}" "${binds[@]}" "$@"
}

case ${1:-} in
  setup) setup; log "ready: root $ROOTFS, venv $VENV" ;;
  path) echo "$ROOTFS" ;;
  run)
    shift
    [[ $# -gt 0 ]] || die "run needs a command"
    setup
    run_in_root "$@"
    ;;
  *) sed -n '2,36p' "$0" >&2; exit 2 ;;
esac
