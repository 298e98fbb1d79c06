"""Fixtures for the OpenVINO backend tests: the conformance suite's server fixtures
(tests/python/conftest.py, loaded under another module name so the two conftests do not
clash), the backend that scripts/test_openvino_backend.sh built, and the OpenVINO IR
models, written for the session by make_openvino_models.py (standard library only).
"""

import importlib.util
import os

import pytest

_here = os.path.dirname(__file__)


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_suite = _load("nereid_python_conftest", os.path.join(_here, "..", "python", "conftest.py"))
_writer = _load("nereid_make_openvino_models", os.path.join(_here, "make_openvino_models.py"))

start_server = _suite.start_server


@pytest.fixture(scope="session")
def openvino(tmp_path_factory):
    """(backend directory, folder of IR models add_sub_<type>.xml/.bin)."""
    backends = os.environ.get("NEREID_OPENVINO_BACKENDS")
    if not backends:
        pytest.fail("run through scripts/test_openvino_backend.sh (NEREID_OPENVINO_BACKENDS "
                    "names the folder holding the built openvino backend)")
    if not os.path.isfile(os.path.join(backends, "openvino", "libtriton_openvino.so")):
        pytest.fail(f"no openvino/libtriton_openvino.so under {backends}: "
                    "run scripts/build_openvino_backend.sh")
    models = tmp_path_factory.mktemp("openvino_ir")
    _writer.main(str(models))
    return backends, str(models)
