#!/usr/bin/env bash
# Makes (once, cached) a Python 3.11 whose `import torch` is PyPI's torch 2.5.1 running on
# the CPU only, and prints its path: the python Triton's QA model generators
# (qa/common/gen_qa_models.py --libtorch, gen_qa_sequence_models.py, ...) need to write
# TorchScript models for scripts/run_triton_qa.sh.
#
# Usage: scripts/torch_cpu_python.sh      (prints e.g. /var/cache/nereid/torch/py-cpu-2.5.1/bin/python)
#
# Why this is needed: PyPI's torch Linux wheels are CUDA builds. torch/_C's
# libtorch_python.so is linked to libtorch_cuda.so, libc10_cuda.so, libcudart.so.12 and
# libcudnn.so.9, and those to cuBLAS, cuDNN, NCCL, ... (the nvidia-* wheels, GBs), which
# a CPU machine has no use for; PyTorch's own CPU wheels live on download.pytorch.org,
# which is out of reach. So the CUDA wheel is installed without its dependencies
# (pip --no-deps, the same torch-2.5.1-cp311 wheel scripts/build_pytorch_backend.sh
# downloads, same version as the libtorch Nereid's pytorch backend runs), and in its
# torch/lib:
#   - libtorch.so becomes the CPU "façade" of scripts/build_pytorch_backend.sh: a library
#     with no code that loads libtorch_cpu.so and libc10.so;
#   - libtorch_cuda.so and libc10_cuda.so become stubs holding just the symbols that
#     torch/_C (libtorch_python.so) and functorch/_C import from them: each function
#     returns 0 (so c10::cuda::device_count() is 0 and torch.cuda.is_available() is
#     False), the data objects are zeroed, the classes pybind11 registers by type get a
#     real vtable and type_info, and c10d::get_gil_checker(), which a static initializer
#     of libtorch_python.so writes through, returns a real variable. The lists come from
#     `readelf --dyn-syms` of the real libraries, so the stubs match this wheel;
#   - libcudnn.so.9 is a two-function stub (cudnnGetVersion, cudnnGetProperty);
#   - libcudart.so.12 and libcupti.so.12 (which libtorch_cpu.so itself needs) come from
#     the small nvidia-cuda-runtime-cu12 and nvidia-cuda-cupti-cu12 wheels, found through
#     the wheel's RPATH (site-packages/nvidia/*/lib), as with a normal pip install;
#   - the CUDA-only libraries nothing loads any more (the real libtorch_cuda.so etc.,
#     1.2 GB) are deleted.
# Then torch's pure-Python dependencies (sympy pinned as torch 2.5.1 pins it) and numpy
# are installed from PyPI. Any CUDA call from Python gets 0 or a null pointer; the
# generators only script, trace and save CPU modules. A smoke test (torch.jit.script,
# save, load, run) checks the result before it is marked ready.
#
# Environment: NEREID_TORCH_CACHE (default /var/cache/nereid/torch: the wheels, and the
# venv in py-cpu-2.5.1), BASE_PYTHON (a CPython 3.11 to make the venv from; default the
# interpreter <repo>/.venv was made from, else python3.11 on PATH), PYTHON (a python
# with pip to download the wheels when they are not cached; default <repo>/.venv/bin/python).
# Needs readelf, cc and c++. Exit status: 0 ready (path printed), 1 failed, 2 missing
# prerequisite.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

TORCH_VERSION=2.5.1
CUDA_RT_VERSION=12.4.127
CACHE=${NEREID_TORCH_CACHE:-/var/cache/nereid/torch}
VENV=$CACHE/py-cpu-$TORCH_VERSION
log() { echo "[torch_cpu_python] $*" >&2; }

if [ -f "$VENV/.ready" ]; then
  echo "$VENV/bin/python"
  exit 0
fi

for tool in readelf cc c++; do
  command -v $tool >/dev/null || { log "MISSING: $tool (Debian: apt-get install binutils g++)"; exit 2; }
done
BASE=${BASE_PYTHON:-}
if [ -z "$BASE" ] && [ -f "$ROOT/.venv/pyvenv.cfg" ]; then
  home=$(sed -n 's/^home *= *//p' "$ROOT/.venv/pyvenv.cfg")
  [ -x "$home/python3.11" ] && BASE=$home/python3.11
fi
[ -n "$BASE" ] || BASE=$(command -v python3.11 || true)
[ -n "$BASE" ] && "$BASE" -c 'import sys, venv; assert sys.version_info[:2] == (3, 11)' 2>/dev/null ||
  { log "MISSING: a CPython 3.11 with venv (the wheel is cp311); set BASE_PYTHON"; exit 2; }

# The wheels: the same files scripts/build_pytorch_backend.sh downloads.
mkdir -p "$CACHE"
torch_whl=$(ls "$CACHE"/torch-$TORCH_VERSION-cp311-cp311-manylinux*_x86_64.whl 2>/dev/null | head -1 || true)
if [ -z "$torch_whl" ]; then
  log "downloading torch==$TORCH_VERSION (cp311, about 900 MB) into $CACHE"
  "${PYTHON:-$ROOT/.venv/bin/python}" -m pip download -q --no-deps --only-binary=:all: \
    --platform manylinux1_x86_64 --python-version 3.11 -d "$CACHE" "torch==$TORCH_VERSION"
  torch_whl=$(ls "$CACHE"/torch-$TORCH_VERSION-cp311-cp311-manylinux*_x86_64.whl | head -1)
fi
for name in cuda_runtime cuda_cupti; do
  if ! ls "$CACHE"/nvidia_${name}_cu12-$CUDA_RT_VERSION-*.whl >/dev/null 2>&1; then
    "${PYTHON:-$ROOT/.venv/bin/python}" -m pip download -q --no-deps --only-binary=:all: -d "$CACHE" \
      "nvidia-${name//_/-}-cu12==$CUDA_RT_VERSION"
  fi
done

log "making $VENV (a few minutes: the wheel unpacks to 1.7 GB)"
rm -rf "$VENV"
"$BASE" -m venv "$VENV"
py=$VENV/bin/python
"$py" -m pip install -q --no-deps "$torch_whl" "$CACHE"/nvidia_cuda_runtime_cu12-$CUDA_RT_VERSION-*.whl \
  "$CACHE"/nvidia_cuda_cupti_cu12-$CUDA_RT_VERSION-*.whl
# torch's own pure-Python requirements (not its nvidia-* and triton ones) and numpy, which
# the generators use (numpy < 2.3: the combination tested with torch 2.5.1 here), and
# ml_dtypes, which qa/common/test_util.py imports on the server's main branch.
"$py" -m pip install -q --no-warn-conflicts filelock 'typing-extensions>=4.8.0' networkx jinja2 fsspec 'sympy==1.13.1' 'numpy<2.3' ml_dtypes

site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
lib=$site/torch/lib
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Classes libtorch_python.so registers with pybind11 (by std::type_info) or whose vtable
# it names, and the one function a static initializer writes through.
cat >"$work/classes.cc" <<'EOF'
namespace at { struct CUDAGeneratorImpl { virtual ~CUDAGeneratorImpl(); }; CUDAGeneratorImpl::~CUDAGeneratorImpl() {} }
namespace torch::jit::tensorexpr { struct CudaCodeGen { virtual ~CudaCodeGen(); }; CudaCodeGen::~CudaCodeGen() {} }
namespace torch::cuda::CUDAPluggableAllocator { struct CUDAPluggableAllocator { virtual ~CUDAPluggableAllocator(); }; CUDAPluggableAllocator::~CUDAPluggableAllocator() {} }
namespace c10d { struct ProcessGroupNCCL { virtual ~ProcessGroupNCCL(); }; ProcessGroupNCCL::~ProcessGroupNCCL() {} }
namespace c10d::intra_node_comm { struct IntraNodeComm { virtual ~IntraNodeComm(); }; IntraNodeComm::~IntraNodeComm() {} }
namespace c10d { using gil_checker_t = bool (*)(); gil_checker_t& get_gil_checker() { static gil_checker_t checker = nullptr; return checker; } }
EOF
c++ -c -fPIC -O1 "$work/classes.cc" -o "$work/classes.o"
# One assembly file per stubbed library: the symbols the python extensions import from it
# (less what classes.cc defines, and less what libstdc++/libgcc define: libc10_cuda.so
# exports its own aligned operator new/delete, which must stay libstdc++'s).
"$py" - "$lib" "$work" "$site"/torch/_C.cpython-311-*.so "$site"/functorch/_C.cpython-311-*.so <<'EOF'
import subprocess, sys
libdir, out, consumers = sys.argv[1], sys.argv[2], [sys.argv[1] + "/libtorch_python.so"] + sys.argv[3:]
def dynsyms(path, defined):
    syms = {}
    text = subprocess.run(["readelf", "-W", "--dyn-syms", path], capture_output=True, text=True, check=True).stdout
    for line in text.splitlines():
        f = line.split()
        if len(f) < 8 or not f[0].rstrip(":").isdigit() or f[4] not in ("GLOBAL", "WEAK"):
            continue
        if (f[6] != "UND") == defined:
            syms[f[7].split("@")[0]] = (f[3], int(f[2], 0))
    return syms
def nm_defined(path):
    text = subprocess.run(["nm", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in text.splitlines() if line.strip()}
wanted = set().union(*(dynsyms(c, False) for c in consumers))
skip = nm_defined(out + "/classes.o")
for name in ("libstdc++.so.6", "libgcc_s.so.1"):
    path = subprocess.run(["c++", "-print-file-name=" + name], capture_output=True, text=True).stdout.strip()
    if path.startswith("/"):
        skip |= set(dynsyms(path, True))
for lib in ("libtorch_cuda.so", "libc10_cuda.so"):
    real = dynsyms(f"{libdir}/{lib}", True)
    names = sorted(wanted & set(real) - skip)
    with open(f"{out}/{lib}.S", "w") as s:
        s.write('.section .note.GNU-stack,"",@progbits\n.text\n')
        for name in names:
            kind, size = real[name]
            if kind in ("FUNC", "IFUNC"):
                s.write(f".globl {name}\n.type {name},@function\n{name}:\n\txorl %eax,%eax\n\tret\n")
            else:
                size = max(size, 8)
                s.write(f".data\n.balign 16\n.globl {name}\n.type {name},@object\n.size {name},{size}\n"
                        f"{name}:\n\t.zero {size}\n.text\n")
    print(f"{lib}: {len(names)} symbols stubbed", file=sys.stderr)
EOF
c++ -shared -fPIC -o "$work/libtorch_cuda.so" -Wl,-soname,libtorch_cuda.so "$work/classes.o" "$work/libtorch_cuda.so.S"
cc -shared -fPIC -o "$work/libc10_cuda.so" -Wl,-soname,libc10_cuda.so "$work/libc10_cuda.so.S"
cat >"$work/cudnn.c" <<'EOF'
int cudnnGetVersion(void) { return 0; }
int cudnnGetProperty(int type, int *value) { (void)type; if (value) *value = 0; return 0; }
EOF
echo 'libcudnn.so.9 { global: *; };' >"$work/cudnn.map"
cc -shared -fPIC -o "$work/libcudnn.so.9" -Wl,-soname,libcudnn.so.9 -Wl,--version-script="$work/cudnn.map" "$work/cudnn.c"
echo 'void nereid_cpu_libtorch(void) {}' >"$work/facade.c"
cc -shared -fPIC -o "$work/libtorch.so" -Wl,-soname,libtorch.so "$work/facade.c" \
  -Wl,--no-as-needed -L"$lib" -ltorch_cpu -lc10 -Wl,-rpath-link,"$lib" -Wl,-rpath,'$ORIGIN'
rm -f "$lib"/libtorch_cuda_linalg.so "$lib"/libcaffe2_nvrtc.so "$lib"/libcusparseLt-*.so*
for f in libtorch_cuda.so libc10_cuda.so libcudnn.so.9 libtorch.so; do
  cp "$work/$f" "$lib/$f"
done

# Smoke test: what the generators do.
cat >"$work/smoke.py" <<'EOF'
import sys
import numpy as np
import torch
assert not torch.cuda.is_available()
class AddSub(torch.nn.Module):
    def forward(self, a, b):
        return a + b, a - b
path = sys.argv[1] + "/m.pt"
torch.jit.script(AddSub()).save(path)
add, sub = torch.jit.load(path)(torch.from_numpy(np.arange(4)), torch.ones(4, dtype=torch.int64))
assert add.tolist() == [1, 2, 3, 4] and sub.numpy().tolist() == [-1, 0, 1, 2]
EOF
(cd "$work" && "$py" smoke.py "$work") || { log "FAILED: the smoke test of $py"; exit 1; }
touch "$VENV/.ready"
log "ready: torch $TORCH_VERSION on the CPU"
echo "$py"
