#!/usr/bin/env bash
# Builds Nereid's container image without a container registry: the Dockerfile needs
# Docker Hub's rust, python and debian images, this script only the Debian mirror apt
# already uses. It bootstraps a minimal bookworm root filesystem, adds the nereid
# binary and ONNX Runtime's library from .venv, and commits an image with buildah whose
# files and configuration are the Dockerfile's (keep the two in step).
#
#   deploy/image/build-offline.sh [--tag TAG] [--save FILE] [NEREID_BIN]
#
# NEREID_BIN defaults to target/release/nereid; TAG to localhost/nereid:latest.
# --save also writes the image to FILE as an oci-archive (`podman load -i FILE`;
# the OCI format has no HEALTHCHECK, so a loaded copy lacks it). Runs as root.
# MIRROR overrides the Debian mirror.
set -euo pipefail

die() { echo "build-offline: $*" >&2; exit 1; }

tag=localhost/nereid:latest
save=
binary=
while [ $# -gt 0 ]; do
  case $1 in
    --tag) tag=${2:?--tag needs a value}; shift 2 ;;
    --save) save=$(realpath -m "${2:?--save needs a file}"); shift 2 ;;
    -*) die "unknown option $1" ;;
    *) binary=$(realpath -m "$1"); shift ;;
  esac
done
cd "$(dirname "$0")/../.."
binary=${binary:-target/release/nereid}

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot and buildah's storage)"
[ -x "$binary" ] || die "no nereid binary at $binary: run scripts/setup.sh or pass its path"
ort_libs=(.venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.*)
[ -f "${ort_libs[0]}" ] || die "no libonnxruntime in .venv: run scripts/setup.sh"

if ! command -v debootstrap >/dev/null || ! command -v buildah >/dev/null; then
  echo "build-offline: installing debootstrap and buildah" >&2
  apt-get update -qq && apt-get install -y -qq debootstrap buildah >/dev/null
fi

# The first Debian archive apt is configured with (one-line or deb822 sources).
mirror=${MIRROR:-$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
  /etc/apt/sources.list.d/*.sources 2>/dev/null |
  grep -v '^[[:space:]]*#' | grep -oE 'https?://[^[:space:]]+/debian/?' | head -n1 || true)}
mirror=${mirror:-http://deb.debian.org/debian}

work=$(mktemp -d)
ctr=
cleanup() {
  [ -z "$ctr" ] || buildah rm "$ctr" >/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
root=$work/rootfs

echo "build-offline: debootstrap bookworm from $mirror" >&2
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
  die "debootstrap failed; its log: $(tail -n 20 "$work/debootstrap.log")"

# What debian:bookworm-slim leaves out too: package lists, downloaded packages,
# documentation, translations. Device nodes, resolv.conf and hostname come from the
# container runtime.
(cd "$root" && rm -rf var/lib/apt/lists/* var/cache/apt/* var/log/* usr/share/doc/* \
  usr/share/man/* usr/share/info/* usr/share/locale/* dev/* etc/resolv.conf etc/hostname)

# The Dockerfile's runtime stage.
chroot "$root" useradd --uid 1000 --user-group --create-home --shell /usr/sbin/nologin nereid
ln -s nereid "$root/usr/local/bin/tritonserver"
install -m 0755 "$binary" "$root/usr/local/bin/nereid"
install -m 0755 "${ort_libs[0]}" "$root/usr/local/lib/libonnxruntime.so"

# The Dockerfile's HEALTHCHECK: buildah splits the line into the same exec-form words.
read -r healthcheck <<'EOF'
CMD bash -c 'exec 3<>/dev/tcp/127.0.0.1/8000 && printf "GET /v2/health/ready HTTP/1.0\r\n\r\n" >&3 && read -r _ status _ <&3 && [ "$status" = 200 ]'
EOF

ctr=$(buildah from --format docker scratch)
cp -a "$root/." "$(buildah mount "$ctr")/"
buildah umount "$ctr" >/dev/null
buildah config \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env ORT_DYLIB_PATH=/usr/local/lib/libonnxruntime.so \
  --label org.opencontainers.image.title=nereid \
  --label "org.opencontainers.image.description=Inference server for Triton model repositories: KServe v2 HTTP and gRPC, ONNX Runtime" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  --user 1000:1000 \
  --port 8000/tcp --port 8001/tcp --port 8002/tcp \
  --healthcheck "$healthcheck" --healthcheck-interval 10s --healthcheck-timeout 3s \
  --healthcheck-start-period 30s --healthcheck-retries 3 \
  --cmd '["tritonserver", "--model-repository=/models"]' \
  "$ctr"
# The docker format keeps the HEALTHCHECK, which OCI image configs cannot hold.
buildah commit --quiet --format docker --rm "$ctr" "$tag" >/dev/null
ctr=

if [ -n "$save" ]; then
  rm -f "$save"
  buildah push --quiet "$tag" "oci-archive:$save:$tag"
  echo "build-offline: saved $save" >&2
fi
echo "build-offline: built $tag, $(buildah images --format '{{.Size}}' "$tag")" >&2
