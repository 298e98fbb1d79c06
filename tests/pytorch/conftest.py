"""Fixtures for the PyTorch backend tests: the conformance suite's server fixtures
(tests/python/conftest.py, loaded under another module name so the two conftests do not
clash), and the backend and TorchScript models that scripts/test_pytorch_backend.sh built.
"""

import importlib.util
import os

import pytest

_path = os.path.join(os.path.dirname(__file__), "..", "python", "conftest.py")
_spec = importlib.util.spec_from_file_location("nereid_python_conftest", _path)
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)

start_server = _suite.start_server


@pytest.fixture(scope="session")
def pytorch():
    """(backend directory, folder of TorchScript files), from the runner's environment."""
    backends = os.environ.get("NEREID_PYTORCH_BACKENDS")
    models = os.environ.get("NEREID_TORCHSCRIPT_MODELS")
    if not backends or not models:
        pytest.fail("run through scripts/test_pytorch_backend.sh (NEREID_PYTORCH_BACKENDS and "
                    "NEREID_TORCHSCRIPT_MODELS name the built backend and models)")
    return backends, models
