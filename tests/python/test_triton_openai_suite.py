"""Triton's own OpenAI frontend tests (`python/openai/tests` of
triton-inference-server/server) against nereid's OpenAI port, unchanged except for the
fixtures that start the server.

Triton's tests are not part of this tree: scripts/python_packages_env.sh copies
`python/openai` into `${NEREID_CACHE:-/var/cache/nereid}/trixie-py312/openai`; when that
copy is absent but a copy of Triton's repository is found (`NEREID_TRITON_SERVER_SRC`,
as that script reads it), `python/openai` is extracted from it into
`${NEREID_CACHE}/triton-openai` the same way. Each run copies the tests into a
temporary folder, replaces their `tests/conftest.py` and `tests/utils.py` with
tests/python/triton_openai_fixture/ (the servers become the real `nereid` binary with
`--openai-port`, Triton's python backend from its nvidia-pytriton wheel serving the mock
models) and runs the modules below with pytest in a subprocess.

Only the tests that work with Triton's CPU mock models (`tests/test_models/mock_llm`,
`identity_py`, `tests/tool_parser_models/tool_stream_py`) can run here: the fixtures'
default model is `mock_llm` in `tests/test_models` (Triton's CI infers a vLLM or
TensorRT-LLM model); those that need a real LLM's answers, and the unit tests of
Triton's Python code, are left out by the fixture's CANNOT_RUN, each with its reason. Where nereid differs on purpose or
lacks a feature, the test is a strict expected failure (the fixture's DIFFERS, with
the reason), so a change either way is noticed. Triton's tests pass a Hugging Face
model name as tokenizer; with no hub to download from, a local folder stands in (a
byte-level BPE tokenizer and Mistral-Nemo's chat template from crates/chat/tests/data).
"""

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import REPO_ROOT
from triton_wheel import python_backend_directory, stub_environment

pytestmark = pytest.mark.timeout(300)

CACHE = os.environ.get("NEREID_CACHE", "/var/cache/nereid")
SERVER_SRC = os.environ.get("NEREID_TRITON_SERVER_SRC", "/work/.mirror/triton-inference-server+server/repo")
FIXTURE = os.path.join(REPO_ROOT, "tests", "python", "triton_openai_fixture")
CHAT_DATA = os.path.join(REPO_ROOT, "crates", "chat", "tests", "data")

# The modules with tests on Triton's mock models. Not run at all (every test needs a
# vLLM or TensorRT-LLM model, or tests Triton's Python code): test_completions.py,
# test_chat_completions.py, test_openai_client.py, test_embeddings.py, test_lora.py.
MODULES = [
    "test_observability.py",
    "test_model_management.py",
    "test_request_size.py",
    "test_tool_calling.py",
    "test_openai_restricted_apis.py",
]


def _usable(folder):
    return os.path.isdir(os.path.join(folder, "tests")) and os.path.isdir(os.path.join(folder, "openai_frontend"))


def triton_openai_source():
    """The cached copy of Triton's `python/openai`, made from a copy of its repository
    when needed; skips (fails under CI=true) without either."""
    cached = os.path.join(CACHE, "trixie-py312", "openai")
    if _usable(cached):
        return cached
    extracted = os.path.join(CACHE, "triton-openai")
    if _usable(extracted):
        return extracted
    check = subprocess.run(["git", "-C", SERVER_SRC, "rev-parse", "-q", "--verify", "HEAD:python/openai"],
                           capture_output=True)
    if check.returncode != 0:
        pytest.skip(f"Triton's OpenAI frontend tests are not cached at {cached} and no copy of Triton's "
                    f"server repository is at {SERVER_SRC} (run scripts/python_packages_env.sh setup "
                    "or set NEREID_TRITON_SERVER_SRC)")
    partial = extracted + ".tmp"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        os.makedirs(partial)
        archive = subprocess.Popen(["git", "-C", SERVER_SRC, "archive", "HEAD", "python/openai"],
                                   stdout=subprocess.PIPE)
        subprocess.run(["tar", "-C", partial, "-xf", "-", "--strip-components=2"], stdin=archive.stdout,
                       check=True)
        if archive.wait() != 0:
            raise OSError("git archive failed")
        os.replace(partial, extracted)
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"cannot copy Triton's python/openai from {SERVER_SRC} into {extracted}: {e}")
    return extracted


def local_tokenizer(folder):
    """A tokenizer folder for `--tokenizer`: a byte-level BPE tokenizer and Mistral-Nemo's
    chat template (Triton's CI downloads the model's own from the Hugging Face hub)."""
    os.makedirs(folder)
    shutil.copy(os.path.join(CHAT_DATA, "byte-level-bpe", "tokenizer.json"), folder)
    with open(os.path.join(CHAT_DATA, "chat_templates", "mistral-nemo-instruct-2407.json")) as f:
        config = json.load(f)["tokenizer_config"]
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    return folder


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    source = triton_openai_source()
    backends = python_backend_directory()
    stub_path = stub_environment()["PATH"]
    root = tmp_path_factory.mktemp("triton-openai")
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(os.path.join(source, "tests"), root / "tests", ignore=ignore)
    shutil.copytree(os.path.join(source, "openai_frontend"), root / "openai_frontend", ignore=ignore)
    for name in ("conftest.py", "utils.py"):
        shutil.copy(os.path.join(FIXTURE, name), root / "tests" / name)
    env = {
        **os.environ,
        "NEREID_REPO_ROOT": REPO_ROOT,
        "NEREID_SUITE_BACKENDS": backends,
        "NEREID_SUITE_STUB_PATH": stub_path,
        "NEREID_SUITE_TOKENIZER": local_tokenizer(str(root / "tokenizer")),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return root, env


def outcomes(junit):
    """(test id, outcome, detail) of each test in a junit XML report."""
    rows = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        outcome, detail = "passed", ""
        for child in case:
            if child.tag == "skipped":
                kind = child.get("type", "")
                outcome = "xfail (differs)" if "xfail" in kind else "skipped"
                detail = child.get("message", "")
            elif child.tag in ("failure", "error"):
                outcome, detail = ("failed" if child.tag == "failure" else "error"), child.get("message", "")
        rows.append((test_id, outcome, detail))
    return rows


@pytest.fixture(scope="module")
def runs(suite, request):
    """Triton's modules, each in its own pytest process, all started at once (each
    server picks free ports): the run takes as long as the slowest module. Only the
    modules this session selected are started."""
    root, env = suite
    selected = [m for m in MODULES if any(f"[{m}]" in item.nodeid for item in request.session.items)]
    started = {}
    for module in selected:
        log = open(root / f"{module}.log", "w+")
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-rfEX", "-p", "no:cacheprovider", "--timeout", "120",
             "-o", "junit_family=xunit1", f"--junitxml={root / (module + '.xml')}", f"tests/{module}"],
            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        started[module] = (proc, log)
    yield root, started
    for proc, log in started.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()


@pytest.mark.parametrize("module", MODULES)
def test_triton_openai_module(runs, module):
    root, started = runs
    proc, log = started[module]
    try:
        code = proc.wait(280)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait(10)
    log.seek(0)
    print(log.read()[-20000:])
    junit = root / f"{module}.xml"
    if junit.exists():
        for test_id, outcome, detail in outcomes(junit):
            print(f"| {test_id} | {outcome} | {detail[:200]} |")
    assert code == 0, f"Triton's {module} against nereid: pytest exit {code}"
