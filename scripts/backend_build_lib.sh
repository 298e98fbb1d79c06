# Shared by the scripts that build one of Triton's framework backends from source against
# a PyPI wheel (scripts/build_pytorch_backend.sh, scripts/build_openvino_backend.sh):
# prerequisite checks that each say one line, and the r24.10 sources exported once from
# the bare git mirrors. Sourced, not run; the caller sets LOG_NAME, BRANCH, SRC and
# MIRRORS first.

log() { echo "[$LOG_NAME] $*" >&2; }
missing=0
need() { log "MISSING: $*"; missing=$((missing + 1)); }

# version_at_least HAVE WANT: whether version HAVE >= WANT.
version_at_least() {
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" = "$2" ]
}

# need_build_tools CMAKE_MIN: cmake (at least CMAKE_MIN, the backend branch's minimum),
# make, c++, RapidJSON, googletest's sources (common r24.10 always declares its unit
# tests) and unzip. Sets GTEST.
need_build_tools() {
  local min=$1 have
  if ! command -v cmake >/dev/null; then
    need "cmake >= $min ($BRANCH's minimum; Debian: apt-get install cmake)"
  else
    have=$(cmake --version | sed -n 's/^cmake version //p')
    version_at_least "$have" "$min" || need "cmake >= $min, found $(cmake --version | head -1)"
  fi
  command -v make >/dev/null || need "make (Debian: apt-get install make)"
  command -v c++ >/dev/null || need "a C++17 compiler as c++ (Debian: apt-get install g++)"
  [ -f /usr/include/rapidjson/document.h ] || need "RapidJSON headers (Debian: apt-get install rapidjson-dev)"
  GTEST=${GTEST_SOURCE_DIR:-/usr/src/googletest}
  [ -f "$GTEST/CMakeLists.txt" ] || need "googletest sources at $GTEST (Debian: apt-get install googletest)"
  command -v unzip >/dev/null || need "unzip (Debian: apt-get install unzip)"
}

# need_pip PYTHON STAMP WHAT: a python with pip to download WHAT, unless STAMP says it was.
need_pip() {
  if [ ! -f "$2" ] && ! "$1" -m pip --version >/dev/null 2>&1; then
    need "python with pip at $1 to download $3 (run scripts/setup.sh or set PYTHON)"
  fi
}

# need_sources NAME...: each triton-inference-server/NAME at BRANCH, exported in SRC or
# exportable from its mirror.
need_sources() {
  local name
  for name in "$@"; do
    if [ ! -d "$SRC/$name" ] && ! git -C "$MIRRORS/triton-inference-server+$name/repo" \
        rev-parse -q --verify "$BRANCH" >/dev/null 2>&1; then
      need "triton-inference-server/$name at $BRANCH: neither $SRC/$name nor a git copy at $MIRRORS/triton-inference-server+$name/repo"
    fi
  done
}

# export_sources NAME...: exports each missing SRC/NAME from its mirror (once; a partial
# export is redone).
export_sources() {
  local name
  for name in "$@"; do
    [ -d "$SRC/$name" ] && continue
    log "exporting $name $BRANCH into $SRC/$name"
    rm -rf "$SRC/$name.part" && mkdir -p "$SRC/$name.part"
    git -C "$MIRRORS/triton-inference-server+$name/repo" archive "$BRANCH" | tar -x -C "$SRC/$name.part"
    mv "$SRC/$name.part" "$SRC/$name"
  done
}
