"""Triton's own Python packages (tritonserver and tritonfrontend 2.73, cp312 wheels for
glibc >= 2.38) running on Nereid's libtritonserver.so.

Run inside the Debian 13 root of scripts/python_packages_env.sh with its venv's Python
3.12 (scripts/test_python_packages.sh does it all). The library is found by name through
LD_LIBRARY_PATH, which must hold NEREID_LIBTRITONSERVER_DIR (the folder with Nereid's
libtritonserver.so). Models: the example ONNX add_sub (examples/models) and the
python-backend models in tests/python_packages/models, served by Triton 2.51's python
backend from the nvidia-pytriton 0.7.0 wheel (NEREID_PYTHON_BACKEND_DIR, set by the
environment's `run`).

A dependency that is missing (the environment, the library, the python backend, ONNX
Runtime) skips with the reason, and fails instead under CI=true. A library that is there
but does not do what the packages need fails.
"""

import glob
import os
import socket
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = os.path.join(HERE, "models")
EXAMPLE_MODELS = os.path.join(REPO_ROOT, "examples", "models")
CI = os.environ.get("CI") == "true"


def unavailable(reason):
    """Skips the test for a missing dependency; under CI=true fails it instead."""
    if CI:
        pytest.fail(f"{reason} (CI=true: a test that cannot run fails)", pytrace=False)
    pytest.skip(reason)


def library_dir():
    """The folder with Nereid's libtritonserver.so, which LD_LIBRARY_PATH must hold."""
    directory = os.environ.get("NEREID_LIBTRITONSERVER_DIR")
    if not directory:
        unavailable("NEREID_LIBTRITONSERVER_DIR is not set (scripts/test_python_packages.sh sets it)")
    library = os.path.join(directory, "libtritonserver.so")
    if not os.path.isfile(library):
        unavailable(f"no libtritonserver.so in {directory} (cargo build --release -p nereid-triton-abi)")
    return os.path.realpath(directory)


def loaded_libtritonserver():
    """Paths of the libtritonserver*.so files mapped into this process."""
    with open("/proc/self/maps") as maps:
        return sorted({line.split()[-1] for line in maps if "libtritonserver" in line.split()[-1]})


@pytest.fixture(scope="session")
def tritonserver():
    """The `tritonserver` module, imported from the wheel and bound to Nereid's library."""
    if sys.version_info[:2] < (3, 12):
        unavailable("tritonserver 2.73 needs Python 3.12: run inside scripts/python_packages_env.sh")
    directory = library_dir()
    search = [os.path.realpath(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    if directory not in search:
        unavailable(f"LD_LIBRARY_PATH does not hold {directory}")
    ort = onnxruntime_library()
    if ort:
        os.environ.setdefault("ORT_DYLIB_PATH", ort)
    try:
        import tritonserver as module
    except ModuleNotFoundError as e:
        unavailable(f"the tritonserver wheel is not installed: {e}")
    # Anything else (an undefined symbol) is Nereid's library failing the package.
    loaded = loaded_libtritonserver()
    assert loaded == [os.path.join(directory, "libtritonserver.so")], loaded
    return module


def onnxruntime_library():
    """libonnxruntime.so for Nereid's ONNX backend: ORT_DYLIB_PATH, else the checkout's
    .venv (scripts/setup.sh installs the onnxruntime wheel there)."""
    if os.environ.get("ORT_DYLIB_PATH"):
        return os.environ["ORT_DYLIB_PATH"]
    found = sorted(glob.glob(os.path.join(
        REPO_ROOT, ".venv", "lib", "python*", "site-packages", "onnxruntime", "capi", "libonnxruntime.so*")))
    return found[0] if found else None


def require_onnxruntime():
    if not onnxruntime_library():
        unavailable("no libonnxruntime.so: run scripts/setup.sh (the checkout's .venv) or set ORT_DYLIB_PATH")


def python_backend_directory():
    """Triton's python backend folder (`backend_directory`), or a skip with the reason."""
    directory = os.environ.get("NEREID_PYTHON_BACKEND_DIR")
    if not directory or not os.path.isfile(os.path.join(directory, "python", "libtriton_python.so")):
        unavailable(f"no Triton python backend at NEREID_PYTHON_BACKEND_DIR={directory!r}")
    if not os.path.isfile(os.path.join(directory, "python", "triton_python_backend_stub")):
        unavailable(f"no python backend stub for Python 3.12 in {directory}/python")
    return directory


def write_repository(root, names):
    """Copies the named models (examples/models or tests/python_packages/models) into
    the repository folder `root`."""
    import shutil

    for name in names:
        source = os.path.join(MODELS, name)
        if not os.path.isdir(source):
            source = os.path.join(EXAMPLE_MODELS, name)
        shutil.copytree(source, os.path.join(root, name), ignore=shutil.ignore_patterns("__pycache__"))
    return str(root)


def free_port():
    """A TCP port free on 127.0.0.1 now (tritonfrontend cannot report a port 0 binding)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout=30.0, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class LogRecords:
    """Collects the records a `log_callback` receives."""

    def __init__(self):
        self.lock = threading.Lock()
        self.records = []

    def __call__(self, level, filename, line, timestamp, message):
        with self.lock:
            self.records.append((level, filename, line, timestamp, message))

    def snapshot(self):
        with self.lock:
            return list(self.records)


def shm_prefix():
    return f"nereid_pypkg_{os.getpid()}_"


def remove_shm_regions(prefix):
    for name in os.listdir("/dev/shm"):
        if name.startswith(prefix):
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass
