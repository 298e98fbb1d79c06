"""Replaces Triton's `tests/utils.py` in the temporary copy of its OpenAI frontend tests
(tests/python/test_triton_openai_suite.py copies it there as `tests/utils.py`).

The names Triton's tests import keep their signatures, but the server they start is
the real `nereid` binary with its OpenAI port instead of `openai_frontend/main.py`
over the in-process `tritonserver` bindings:

- `OpenAIServer(cli_args)`: Triton's frontend flags translated to nereid's
  (`--backend` -> `--openai-backend`, dropped when None, `--tool-call-parser llama3`
  -> `llama3_json`, `--http-max-input-size` kept: nereid's OpenAI port reads it too, the
  tokenizer a local folder); ports are picked by the binary (port 0) and read from
  its log. A server that does not come up raises with everything it printed, as
  Triton's does with its stderr.
- `setup_server(...)` + `setup_fastapi_app(...)`: the pair Triton's FastAPI
  `TestClient` tests use; here they describe one nereid process, started when the app
  is made and stopped by `server.stop()`. The `TestClient` that the copied conftest
  puts in `fastapi.testclient` is an httpx client on that process's OpenAI port.

Flags the translation does not know are passed on unchanged, so a flag nereid lacks
fails the start as it would for a user.
"""

import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import openai
import requests

# As Triton's utils: its tests import the frontend's modules (middleware constants).
sys.path.append(os.path.join(Path(__file__).resolve().parent, "..", "openai_frontend"))

_REPO_ROOT = os.environ["NEREID_REPO_ROOT"]
_spec = importlib.util.spec_from_file_location(
    "nereid_python_harness", os.path.join(_REPO_ROOT, "tests", "python", "conftest.py")
)
_harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_harness)

# Triton's python backend (tests/python/triton_wheel.py, resolved by the wrapper) and the
# local tokenizer folder standing in for a Hugging Face model name.
BACKENDS = os.environ["NEREID_SUITE_BACKENDS"]
STUB_PATH = os.environ["NEREID_SUITE_STUB_PATH"]
TOKENIZER = os.environ["NEREID_SUITE_TOKENIZER"]

# Triton frontend flag -> nereid flag (None: dropped, nereid has it on its own terms).
_RENAMED = {
    "--host": "--openai-address",
    "--tritonserver-log-verbose-level": "--log-verbose",
}
_DROPPED_WITH_VALUE = {"--openai-port", "--kserve-http-port", "--kserve-grpc-port", "--uvicorn-log-level"}
_DROPPED = {"--enable-kserve-frontends"}
# Triton's parser names -> nereid's.
_PARSERS = {"llama3": "llama3_json"}


def nereid_args(cli_args: List[str]) -> List[str]:
    """nereid's command line for a Triton frontend command line."""
    args = [
        "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
        "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
        "--openai-port", "0", "--openai-address", "127.0.0.1",
        "--backend-directory", BACKENDS,
    ]
    it = iter([str(a) for a in cli_args])
    for flag in it:
        name, eq, inline = flag.partition("=")
        if name in _DROPPED:
            continue
        if name in _DROPPED_WITH_VALUE:
            if not eq:
                next(it, None)
            continue
        if name == "--tokenizer":
            if not eq:
                next(it, None)
            args += ["--tokenizer", TOKENIZER]
            continue
        if name == "--tool-call-parser":
            value = inline if eq else next(it, "")
            args += ["--tool-call-parser", _PARSERS.get(value, value)]
            continue
        if name == "--backend":
            # Triton's fixtures pass their `backend` fixture, None with the mock models.
            value = inline if eq else next(it, "")
            if value not in ("", "None"):
                args += ["--openai-backend", value]
            continue
        if name in _RENAMED:
            args += [_RENAMED[name]] + ([inline] if eq else [])
            continue
        args.append(flag)
    return args


class OpenAIServer:
    API_KEY = "EMPTY"
    START_TIMEOUT = 60

    def __init__(self, cli_args: List[str], *, env_dict: Optional[Dict[str, str]] = None) -> None:
        env = {"PATH": STUB_PATH, **(env_dict or {})}
        self.argv = nereid_args(cli_args)
        self._server = _harness.Server(
            _harness.REPO_ROOT, self.argv, env=env, expect=_harness.THREE_LISTENERS | {"openai"}
        )
        try:
            self._server.wait_started(timeout=self.START_TIMEOUT)
        except _harness.pytest.fail.Exception as e:
            # Triton's fixture raises an ordinary exception holding the server's stderr.
            raise RuntimeError(
                f"Server exited unexpectedly with return code {self._server.proc.poll()}.\n"
                f"Stderr output:\n{self._server.log()}"
            ) from e
        self.host, port = self._server.bound["openai"]
        self.port = int(port)
        self._wait_ready()

    def _wait_ready(self):
        deadline = time.monotonic() + self.START_TIMEOUT
        while requests.get(self.url_for("health", "ready"), timeout=10).status_code != 200:
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Server failed to get ready in time.\n{self._server.log()}")
            time.sleep(0.1)

    def stop(self):
        self._server.kill()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        self.stop()

    @property
    def url_root(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url_for(self, *parts: str) -> str:
        return self.url_root + "/" + "/".join(parts)

    def get_client(self):
        return openai.OpenAI(base_url=self.url_for("v1"), api_key=self.API_KEY)

    def get_async_client(self):
        return openai.AsyncOpenAI(base_url=self.url_for("v1"), api_key=self.API_KEY)


class _ServerSpec:
    """What Triton's `setup_server` returns: here the repository and model control flags
    of the nereid process `setup_fastapi_app` starts."""

    def __init__(self, args: List[str]):
        self.args = args
        self.process: Optional[OpenAIServer] = None

    def stop(self):
        if self.process is not None:
            self.process.stop()


def setup_server(model_repository: str, model_control_mode=None, load_models: Optional[List[str]] = None):
    args = ["--model-repository", str(model_repository)]
    mode = getattr(model_control_mode, "name", model_control_mode)
    if mode:
        args += ["--model-control-mode", str(mode).lower()]
    for model in load_models or []:
        args += ["--load-model", model]
    return _ServerSpec(args)


def setup_fastapi_app(
    tokenizer: str,
    server: _ServerSpec,
    backend: str,
    default_max_tokens: int = 16,
    tool_call_parser: Optional[str] = None,
    max_tool_call_parse_bytes: Optional[int] = None,
):
    args = list(server.args) + ["--default-max-tokens", str(default_max_tokens)]
    if tokenizer:
        args += ["--tokenizer", tokenizer]
    if backend:
        args += ["--backend", backend]
    if tool_call_parser:
        args += ["--tool-call-parser", tool_call_parser]
    if max_tool_call_parse_bytes is not None:
        args += ["--max-tool-call-parse-bytes", str(max_tool_call_parse_bytes)]
    server.process = OpenAIServer(args)
    return server.process
