"""Every TRITONSERVER_* / TRITONBACKEND_* function that Triton 2.73's Python extension
modules (tritonserver/_c, tritonfrontend/_c) and Triton's python backend import is
exported by Nereid's libtritonserver.so, compared with `nm -D`.

Needs no Python 3.12: on the host the extension modules are read from the wheels in
${NEREID_CACHE:-/var/cache/nereid}/wheels312 (or from the installed packages inside the
environment). `NEREID_LIBTRITONSERVER_DIR=target/release pytest tests/python_packages/test_exports.py`.
"""

import glob
import importlib.util
import os
import shutil
import subprocess
import zipfile

import pytest

from conftest import library_dir, unavailable

PACKAGES = ("tritonserver", "tritonfrontend")
PREFIXES = ("TRITONSERVER_", "TRITONBACKEND_")


def nm(path, *flags):
    """The dynamic symbols `nm -D <flags>` lists for `path`."""
    if not shutil.which("nm"):
        unavailable("nm (binutils) is not installed")
    out = subprocess.run(["nm", "-D", *flags, path], check=True, capture_output=True, text=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def extension_modules(package, tmp_path):
    """The package's `_c/*.so`: from the installed package, else from its wheel."""
    spec = importlib.util.find_spec(package)  # finds, does not import
    if spec is not None and spec.submodule_search_locations:
        found = sorted(glob.glob(os.path.join(spec.submodule_search_locations[0], "_c", "*.so")))
        if found:
            return found
    cache = os.environ.get("NEREID_CACHE", "/var/cache/nereid")
    wheels = sorted(glob.glob(os.path.join(cache, "wheels312", f"{package}-2.73.0-*.whl")))
    if not wheels:
        unavailable(f"{package} 2.73.0 is neither installed nor in {cache}/wheels312")
    with zipfile.ZipFile(wheels[0]) as wheel:
        members = [n for n in wheel.namelist() if n.startswith(f"{package}/_c/") and n.endswith(".so")]
        for member in members:
            wheel.extract(member, tmp_path)
    return [os.path.join(tmp_path, m) for m in members]


def needed_by(paths):
    needed = set()
    for path in paths:
        needed |= {s for s in nm(path, "--undefined-only") if s.startswith(PREFIXES)}
    return needed


def exported():
    return nm(os.path.join(library_dir(), "libtritonserver.so"), "--defined-only")


@pytest.mark.parametrize("package", PACKAGES)
def test_extension_module_imports_are_exported(package, tmp_path):
    modules = extension_modules(package, tmp_path)
    assert modules, f"{package} has no extension module"
    needed = needed_by(modules)
    # The bindings wrap the C API: a handful of symbols would mean nm read the wrong file.
    assert len(needed) > (100 if package == "tritonserver" else 20), sorted(needed)
    missing = sorted(needed - exported())
    assert not missing, (
        f"{len(missing)} of the {len(needed)} functions {package} 2.73 imports are not exported "
        f"by Nereid's libtritonserver.so: {', '.join(missing)}")


def test_python_backend_imports_are_exported():
    """Triton's python backend (libtriton_python.so) calls back into the core library."""
    directory = os.environ.get("NEREID_PYTHON_BACKEND_DIR")
    backend = os.path.join(directory or "", "python", "libtriton_python.so")
    if not directory or not os.path.isfile(backend):
        unavailable(f"no Triton python backend at NEREID_PYTHON_BACKEND_DIR={directory!r}")
    needed = needed_by([backend])
    assert len(needed) > 50, sorted(needed)
    missing = sorted(needed - exported())
    assert not missing, (
        f"{len(missing)} of the {len(needed)} functions Triton's python backend imports are not "
        f"exported by Nereid's libtritonserver.so: {', '.join(missing)}")
