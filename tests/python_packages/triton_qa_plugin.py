"""pytest plugin for Triton's own L0_python_api tests run by
scripts/run_triton_python_api_qa.sh (loaded with `-p triton_qa_plugin`; the tests
themselves stay Triton's, copied outside the checkout).

- Each test marked xfail upstream gets the junit property `upstream_xfail` (the mark's
  reason): the runner runs them anyway (`--runxfail`) and reports their failures
  without failing the run, as Triton's CI does not run them.
- At the end the session fails (exit status 3) unless the libtritonserver.so mapped
  into the process is the one in NEREID_LIBTRITONSERVER_DIR, so the table can never
  report Triton's own library.
"""

import os

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        mark = item.get_closest_marker("xfail")
        if mark is not None:
            item.user_properties.append(("upstream_xfail", mark.kwargs.get("reason", "")))


def _mapped_libtritonserver():
    with open("/proc/self/maps") as maps:
        return sorted({line.split()[-1] for line in maps if "libtritonserver" in line.split()[-1]})


def pytest_sessionfinish(session, exitstatus):
    directory = os.environ.get("NEREID_LIBTRITONSERVER_DIR")
    if not directory:
        return
    expected = [os.path.join(os.path.realpath(directory), "libtritonserver.so")]
    mapped = [os.path.realpath(path) for path in _mapped_libtritonserver()]
    if mapped and mapped != expected:
        print(f"\ntriton_qa_plugin: libtritonserver mapped from {mapped}, expected {expected}")
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
