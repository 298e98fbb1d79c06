"""Triton 2.51's own binaries from the nvidia-pytriton 0.7.0 wheel, for the tests that
prove compatibility with them (its cache plugin, its python backend).

The wheel (about 55 MB) is downloaded once into a cache folder under the system temp
directory (TRITON_CACHE overrides it) and unpacked there with its file modes. The
python backend's stub embeds the system libpython3.11 and finds its packages through
the first `python3` on PATH; it needs numpy < 2, so a virtualenv with it is made once
beside the wheel. Every step that cannot be done skips the calling test with the reason.
"""

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

import pytest

WHEEL = "nvidia_pytriton-0.7.0"
CACHE = os.environ.get("TRITON_CACHE") or os.path.join(tempfile.gettempdir(), "nereid-triton-wheel")
UNPACKED = os.path.join(CACHE, "unpacked")
BACKENDS = os.path.join(UNPACKED, "pytriton", "tritonserver", "backends")


def wheel_file():
    """The wheel, downloaded once."""
    os.makedirs(CACHE, exist_ok=True)
    wheels = glob.glob(os.path.join(CACHE, f"{WHEEL}-*.whl"))
    if not wheels:
        try:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "nvidia-pytriton==0.7.0", "--no-deps",
                 "--only-binary=:all:", "-d", CACHE, "-q"],
                check=True, timeout=300, capture_output=True,
            )
        except (subprocess.SubprocessError, OSError) as e:
            detail = (getattr(e, "stderr", b"") or b"").decode(errors="replace")[-300:]
            pytest.skip(f"cannot download nvidia-pytriton 0.7.0 (Triton 2.51's binaries): {e} {detail}")
        wheels = glob.glob(os.path.join(CACHE, f"{WHEEL}-*.whl"))
        if not wheels:
            pytest.skip("pip download of nvidia-pytriton 0.7.0 left no wheel")
    return wheels[0]


def extract(*prefixes):
    """Unpacks the wheel's members under `prefixes` (once), keeping their file modes;
    returns the unpacked root."""
    with zipfile.ZipFile(wheel_file()) as wheel:
        for info in wheel.infolist():
            if not info.filename.startswith(prefixes) or info.is_dir():
                continue
            target = os.path.join(UNPACKED, info.filename)
            if os.path.exists(target):
                continue
            wheel.extract(info, UNPACKED)
            mode = info.external_attr >> 16
            if mode:
                os.chmod(target, mode & 0o777)
    return UNPACKED


def python_backend_directory():
    """A `--backend-directory` holding Triton's python backend, with the wheel's stub for
    this Python version installed beside it (as triton-anchor.sh does), and the
    libraries the backend needs in their place in the wheel."""
    version = "%d.%d" % sys.version_info[:2]
    stubs = "pytriton/tritonserver/python_backend_stubs/"
    extract("pytriton/tritonserver/backends/python/", "nvidia_pytriton.libs/", stubs)
    stub = os.path.join(UNPACKED, stubs, version, "triton_python_backend_stub")
    if not os.path.exists(stub):
        pytest.skip(f"the wheel has no python backend stub for Python {version}")
    installed = os.path.join(BACKENDS, "python", "triton_python_backend_stub")
    if not os.path.exists(installed):
        shutil.copyfile(stub, installed + ".tmp")
        os.chmod(installed + ".tmp", 0o755)
        os.replace(installed + ".tmp", installed)
    missing = subprocess.run(["ldd", installed], capture_output=True, text=True).stdout
    if "not found" in missing:
        pytest.skip(f"the python backend stub cannot run here (scripts/test.sh installs libpython{version}): {missing}")
    return BACKENDS


def stub_environment():
    """Environment for a server whose python backend stubs need numpy < 2: PATH with a
    virtualenv that has it first."""
    venv = os.path.join(CACHE, "stub-venv")
    python = os.path.join(venv, "bin", "python3")
    check = [python, "-c", "import numpy, sys; sys.exit(int(numpy.__version__.split('.')[0]) >= 2)"]
    if not os.path.exists(python) or subprocess.run(check, capture_output=True).returncode != 0:
        try:
            subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True, timeout=300,
                           capture_output=True)
            subprocess.run([python, "-m", "pip", "install", "-q", "numpy<2"], check=True, timeout=600,
                           capture_output=True)
        except (subprocess.SubprocessError, OSError) as e:
            detail = (getattr(e, "stderr", b"") or b"").decode(errors="replace")[-300:]
            pytest.skip(f"cannot make a virtualenv with numpy<2 for the python backend stub: {e} {detail}")
    return {"PATH": os.path.join(venv, "bin") + os.pathsep + os.environ.get("PATH", "")}
