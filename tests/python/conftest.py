"""Conformance suite: the real `nereid` binary driven by NVIDIA's `tritonclient`.

The tests are black-box, in the manner of Triton's own `qa/L0_*` suites: every
test talks to a real server process over HTTP, gRPC and the metrics port, with
the same client library Triton users have, and checks Triton's exact replies
(status codes and error texts come from
shared/reference/triton-behaviour.md and from probing a real Triton 2.51; a
comment marks each place where Nereid deliberately differs).

Running
-------
    python3 -m venv .venv && .venv/bin/pip install -r requirements.txt
    cargo build --release                 # or set NEREID_BIN=/path/to/nereid
    .venv/bin/python scripts/make_models.py   # only if examples/models changed
    .venv/bin/pytest tests/python

The binary is `$NEREID_BIN`, default `target/release/nereid` under the
repository root. Each server is started as

    nereid --model-repository REPO --http-port 0 --grpc-port 0 --metrics-port 0
           --http-address 127.0.0.1 --grpc-address 127.0.0.1 [extra args]

and the bound ports are read from its log lines, which are Triton's:
`Started GRPCInferenceService at HOST:PORT`, `Started HTTPService at HOST:PORT`,
`Started Metrics Service at HOST:PORT` (and `Started Sagemaker HTTPService at ...`,
`Started Vertex AI HTTPService at ...` when those endpoints are on).

Fixtures
--------
- `server` (session): one server on examples/models with `--allow-client-shm=true`,
  shared by the tests that only read or infer. Tests that count things (statistics, metrics) start their
  own server so other tests' traffic cannot change the numbers.
- `http_client`, `grpc_client` (session): tritonclient clients for `server`.
- `start_server` (function): start a server on any repository with extra args;
  every server it started is killed at teardown.
- `make_repo` (function): copy models from examples/models into a fresh
  tmp_path repository, optionally replacing config.pbtxt files.
- `add_sub_io` (builds add_sub's two FP32 inputs for either client module),
  `error_of` (calls something that must raise InferenceServerException and
  returns the exception) and `poll` (waits for a condition).

Where Triton's answer depends on an implementation accident (e.g. which input
an unordered map visits first), the test accepts each of Triton's possible
answers and says so in a comment.

Every test has a 60 s timeout (pytest-timeout) so a hung server fails the test
instead of the run.
"""

import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE_MODELS = os.path.join(REPO_ROOT, "examples", "models")
STARTUP_TIMEOUT_S = 20
TEST_TIMEOUT_S = 60

# Triton's startup lines, e.g. `Started HTTPService at 127.0.0.1:8000`
# (Triton prints them inside a quoted log message; match anywhere in the line).
_STARTED = re.compile(
    r"Started (GRPCInferenceService|HTTPService|Metrics Service|Sagemaker HTTPService|"
    r"Vertex AI HTTPService|OpenAIService) at "
    r"(\[[0-9a-fA-F:.]+\]|[0-9.]+|[A-Za-z0-9.-]+):(\d+)"
)
_SERVICE_KEYS = {
    "GRPCInferenceService": "grpc",
    "HTTPService": "http",
    "Metrics Service": "metrics",
    "Sagemaker HTTPService": "sagemaker",
    "Vertex AI HTTPService": "vertex_ai",
    "OpenAIService": "openai",
}
# Triton's OpenAI frontend tests get this folder's conftest.py and utils.py in place of
# their own (tests/python/test_triton_openai_suite.py); pytest must not collect it here.
collect_ignore = ["triton_openai_fixture"]

# The listeners a server is waited for unless told otherwise (`expect=`).
THREE_LISTENERS = frozenset({"grpc", "http", "metrics"})


def nereid_bin():
    path = os.environ.get("NEREID_BIN", os.path.join(REPO_ROOT, "target", "release", "nereid"))
    if not os.path.isabs(path):
        path = os.path.join(REPO_ROOT, path)
    return path


class Response:
    """A raw HTTP reply: status, headers (lower-case names) and body bytes."""

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"Response({self.status}, {self.headers}, {self.body[:300]!r})"


class Server:
    """One running nereid process and the addresses it reported."""

    def __init__(self, repo, args, env=None, expect=THREE_LISTENERS):
        binary = nereid_bin()
        if not os.path.exists(binary):
            pytest.fail(
                f"nereid binary not found at {binary}: run `cargo build --release` "
                "or set NEREID_BIN"
            )
        self.repo = repo
        self.argv = [binary] + list(args)
        self.lines = []  # every log line, stdout and stderr interleaved
        self.bound = {}  # "http" | "grpc" | "metrics" | "sagemaker" | "vertex_ai" -> (host, port)
        self.expect = frozenset(expect)  # the listeners wait_started waits for
        self._all_bound = threading.Event()
        self._lock = threading.Lock()  # guards lines/bound against the reader thread
        # stdout is folded into the same pipe: the startup lines go to stderr, but
        # a failure is easier to read with everything the process printed.
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            env=None if env is None else {**os.environ, **env},
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for raw_line in self.proc.stdout:
            line = raw_line.decode("utf-8", "replace").rstrip("\n")
            with self._lock:
                self.lines.append(line)
                m = _STARTED.search(line)
                if m:
                    host = m.group(2).strip("[]")
                    self.bound[_SERVICE_KEYS[m.group(1)]] = (host, int(m.group(3)))
                    if self.expect <= self.bound.keys():
                        self._all_bound.set()
        self._all_bound.set()  # EOF: wake the waiter, which then sees the exit

    def wait_started(self, timeout=STARTUP_TIMEOUT_S):
        self._all_bound.wait(timeout)
        with self._lock:
            complete = self.expect <= self.bound.keys()
        if not complete:
            self.kill()
            pytest.fail(
                f"nereid did not report its listeners {sorted(self.expect)} within {timeout}s "
                f"(exit code {self.proc.poll()}); argv: {self.argv}\n{self.log(last=200)}"
            )
        return self

    def log(self, last=None):
        """Everything the process printed so far (or only the `last` lines)."""
        with self._lock:
            lines = self.lines if last is None else self.lines[-last:]
            return "\n".join(lines)

    def wait_exit(self, timeout):
        """Exit code, or None if still running after timeout. After an exit the
        reader has drained the pipe, so log() holds the last words."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._reader.join(5)
        return code

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(5)

    def signal(self, sig):
        self.proc.send_signal(sig)

    def _addr(self, key):
        host, port = self.bound[key]
        # A wildcard bind is reached through loopback.
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return f"{host}:{port}"

    @property
    def http_url(self):
        return self._addr("http")

    @property
    def openai_url(self):
        """The OpenAI port's base URL, as the `openai` client takes it."""
        return f"http://{self._addr('openai')}/v1"

    @property
    def grpc_url(self):
        return self._addr("grpc")

    @property
    def metrics_url(self):
        return self._addr("metrics")

    def request(self, method, path, body=None, headers=None, port="http"):
        """Raw HTTP request with http.client; never raises on error statuses."""
        host, p = self._addr(port).rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(p), timeout=30)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            data = resp.read()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            return Response(resp.status, hdrs, data)
        finally:
            conn.close()

    def metrics(self):
        resp = self.request("GET", "/metrics", port="metrics")
        assert resp.status == 200, resp
        return resp.body.decode()

    def http_client(self):
        return httpclient.InferenceServerClient(self.http_url, network_timeout=30.0)

    def grpc_client(self):
        return grpcclient.InferenceServerClient(self.grpc_url)


def base_args(repo, extra=()):
    return [
        "--model-repository",
        repo,
        "--http-port",
        "0",
        "--grpc-port",
        "0",
        "--metrics-port",
        "0",
        "--http-address",
        "127.0.0.1",
        "--grpc-address",
        "127.0.0.1",
        *extra,
    ]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true a skipped test fails: a dependency missing on the CI machine must not
    let the suite pass without having run what it claims (an expected failure, xfail,
    stays what it is)."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") == "true" and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which fails instead: {report.longrepr}"


def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT_S))


@pytest.fixture(scope="session")
def server():
    # Client shared memory is off by default (as in Triton since --allow-client-shm);
    # the shared server's tests use it, as Triton's L0_http / L0_grpc servers do.
    srv = Server(EXAMPLE_MODELS, base_args(EXAMPLE_MODELS, ["--allow-client-shm=true"]))
    try:
        srv.wait_started()
        yield srv
    finally:
        srv.kill()


@pytest.fixture(scope="session")
def http_client(server):
    client = server.http_client()
    yield client
    client.close()


@pytest.fixture(scope="session")
def grpc_client(server):
    client = server.grpc_client()
    yield client
    client.close()


@pytest.fixture
def start_server():
    """start_server(repo, *extra_args, wait=True, raw_args=None, env=None, expect=...) -> Server.

    With raw_args the argument list is used as given (CLI tests); otherwise
    base_args(repo, extra_args). wait=False returns before the listeners are up.
    env: variables added to the server's environment. expect: the listeners to wait
    for (default gRPC, HTTP and metrics; e.g. {"sagemaker"} for SageMaker alone).
    """
    started = []

    def start(repo, *extra, wait=True, raw_args=None, env=None, expect=THREE_LISTENERS):
        args = raw_args if raw_args is not None else base_args(repo, extra)
        srv = Server(repo, args, env=env, expect=expect)
        started.append(srv)
        return srv.wait_started() if wait else srv

    yield start
    for srv in started:
        srv.kill()


@pytest.fixture(scope="session")
def fake_cuda(tmp_path_factory):
    """The CUDA driver test double (fake_cuda/fake_cuda.c), built once: a server given
    NEREID_CUDA_LIBRARY=<it> sees FAKE_CUDA_DEVICES GPUs (default 1)."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    assert gcc, "a C compiler is needed to build the CUDA driver test double"
    lib = tmp_path_factory.mktemp("fake_cuda") / "libfakecuda.so"
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_cuda", "fake_cuda.c")
    subprocess.run([gcc, "-shared", "-fPIC", "-O1", "-o", str(lib), source], check=True)
    return str(lib)


@pytest.fixture
def make_repo(tmp_path):
    """make_repo(models, configs=None) -> path of a new repository.

    models: names copied from examples/models. configs: {model name: text}
    written as that model's config.pbtxt (a name not in `models` gets a new
    directory with a copy of add_sub's version 1, so a broken config can sit
    next to a valid graph).
    """

    def make(models, configs=None):
        repo = tmp_path / "models"
        repo.mkdir(exist_ok=True)
        for name in models:
            shutil.copytree(os.path.join(EXAMPLE_MODELS, name), repo / name)
        for name, text in (configs or {}).items():
            if not (repo / name).exists():
                shutil.copytree(os.path.join(EXAMPLE_MODELS, "add_sub", "1"), repo / name / "1")
            (repo / name / "config.pbtxt").write_text(text)
        return str(repo)

    return make


# The add_sub input/output section, from the script that writes the example models.
sys.path.insert(0, os.path.join(REPO_ROOT, "scripts"))
from make_models import ADD_SUB_IO  # noqa: E402


def add_sub_config(name="add_sub", max_batch_size=8, kind="KIND_CPU", count=1, extra=""):
    """config.pbtxt text for the add_sub graph under another name or settings."""
    return (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {max_batch_size}\n'
        f"{ADD_SUB_IO}instance_group [ {{ kind: {kind} count: {count} }} ]\n{extra}"
    )


def run_in_threads(target, count):
    """Run target(index) on `count` threads at once and wait for all of them."""
    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def rss_mib(pid):
    """Resident memory of process `pid` in MiB (VmRSS), for the memory-bound tests."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def wait_for(predicate, timeout=10.0, interval=0.05, what="condition"):
    """Poll predicate() until it returns a truthy value; fail after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@pytest.fixture
def poll():
    return wait_for


def add_sub_inputs(client_module, a, b, binary=True):
    """INPUT0/INPUT1 for add_sub from two float32 arrays of shape [batch, 4]."""
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        inp = client_module.InferInput(name, list(value.shape), "FP32")
        if client_module is httpclient:
            inp.set_data_from_numpy(value, binary_data=binary)
        else:
            inp.set_data_from_numpy(value)
        inputs.append(inp)
    return inputs


def add_sub_body(a, b, binary=True):
    """An add_sub request as tritonclient's HTTP client would send it, for raw HTTP:
    (body bytes, length of its JSON part or None when it is all JSON)."""
    inputs = add_sub_inputs(httpclient, a, b, binary=binary)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    return httpclient.InferenceServerClient.generate_request_body(inputs, outputs=outputs)


def expect_error(fn, *args, **kwargs):
    """Call fn, which must raise InferenceServerException; return the exception."""
    try:
        result = fn(*args, **kwargs)
    except InferenceServerException as e:
        return e
    pytest.fail(f"expected an InferenceServerException, got {result!r}")


@pytest.fixture
def add_sub_io():
    return add_sub_inputs


@pytest.fixture
def error_of():
    return expect_error
