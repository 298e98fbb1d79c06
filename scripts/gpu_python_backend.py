"""Stages Triton 2.51's python backend (a GPU build: it links CUDA's runtime) from the
nvidia-pytriton 0.7.0 wheel for scripts/gpu_check.sh, in the wheel's own layout, which
its RPATH ($ORIGIN/../../../../nvidia_pytriton.libs) expects:

    STAGING/pytriton/tritonserver/backends/python/   libtriton_python.so, the utils
                                                     module, the Python 3.12 stub
    STAGING/nvidia_pytriton.libs/                    the wheel's libraries those load

Only the libraries they need (readelf's NEEDED, followed) are kept, and none of
Triton's core (libtritonserver-*.so): nereid satisfies that dependency itself.

The wheel is taken from TRITON_CACHE (tests/python/triton_wheel.py's cache, default
<tmp>/nereid-triton-wheel), else downloaded there with pip.

Usage: python3 scripts/gpu_python_backend.py STAGING
"""

import glob
import os
import subprocess
import sys
import tempfile
import zipfile

WHEEL = "nvidia_pytriton-0.7.0"
BACKEND = "pytriton/tritonserver/backends/python/"
STUB = "pytriton/tritonserver/python_backend_stubs/3.12/triton_python_backend_stub"
LIBS = "nvidia_pytriton.libs/"


def wheel_path():
    cache = os.environ.get("TRITON_CACHE") or os.path.join(tempfile.gettempdir(), "nereid-triton-wheel")
    found = glob.glob(os.path.join(cache, f"{WHEEL}-*.whl"))
    if not found:
        os.makedirs(cache, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "-d", cache, "nvidia-pytriton==0.7.0"], check=True)
        found = glob.glob(os.path.join(cache, f"{WHEEL}-*.whl"))
    return found[0]


def needed(path):
    """The NEEDED entries of an ELF file."""
    dynamic = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]


def extract(wheel, member, target, staging):
    info = wheel.getinfo(member)
    path = os.path.join(staging, target)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with wheel.open(info) as source, open(path, "wb") as sink:
        sink.write(source.read())
    os.chmod(path, (info.external_attr >> 16) & 0o777 or 0o644)
    return path


def main(staging):
    with zipfile.ZipFile(wheel_path()) as wheel:
        names = set(wheel.namelist())
        libraries = {os.path.basename(n) for n in names if n.startswith(LIBS)}
        todo = []
        for member in ("libtriton_python.so", "triton_python_backend_utils.py"):
            todo.append(extract(wheel, BACKEND + member, BACKEND + member, staging))
        stub = extract(wheel, STUB, BACKEND + "triton_python_backend_stub", staging)
        os.chmod(stub, 0o755)
        todo.append(stub)
        kept = set()
        while todo:
            path = todo.pop()
            if not path.endswith((".so", "_stub")) and ".so." not in path:
                continue
            for library in needed(path):
                if library in libraries and library not in kept and not library.startswith("libtritonserver"):
                    kept.add(library)
                    todo.append(extract(wheel, LIBS + library, LIBS + library, staging))
    print(f"staged Triton's python backend and {len(kept)} of the wheel's libraries in {staging}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
