"""Triton's OpenAI-compatible frontend (python/openai of the server repository, 2.73),
unchanged, on Nereid's libtritonserver.so, driven by the `openai` client.

The frontend's source is never part of this repository: scripts/python_packages_env.sh
copies it from a copy of Triton's server repository into its cache folder and `run`
names it in NEREID_ENV_OPENAI. Its main.py runs as a child process over an in-process
server (default backend directory /opt/tritonserver/backends, which the environment
links to Triton's python backend) with --backend vllm, serving llm_py: a python model
with the vLLM backend's tensors whose "generation" is the prompt's words reversed. The
chat template comes from a word-level tokenizer made here (no download).
"""

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from conftest import free_port, python_backend_directory, unavailable, write_repository

pytestmark = pytest.mark.timeout(300)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="module")
def frontend_main():
    source = os.environ.get("NEREID_ENV_OPENAI", "")
    main = os.path.join(source, "openai_frontend", "main.py")
    if not os.path.isfile(main):
        unavailable(f"Triton's OpenAI frontend source is not available (NEREID_ENV_OPENAI={source!r}; "
                    "scripts/python_packages_env.sh copies it from a copy of Triton's server repository)")
    return main


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """A word-level Hugging Face tokenizer with a chat template, saved locally."""
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast
    except ModuleNotFoundError as e:
        unavailable(f"transformers/tokenizers are not installed: {e}")
    words = ["[UNK]", "<s>", "</s>", "hello", "world", "one", "two", "three"]
    model = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    model.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=model, unk_token="[UNK]", bos_token="<s>", eos_token="</s>")
    tokenizer.chat_template = CHAT_TEMPLATE
    directory = tmp_path_factory.mktemp("tokenizer")
    tokenizer.save_pretrained(directory)
    return str(directory)


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except (urllib.error.URLError, OSError):
        return None


@pytest.fixture(scope="module")
def openai_url(tritonserver, frontend_main, tokenizer_dir, tmp_path_factory):
    python_backend_directory()  # skips (fails under CI) without Triton's python backend
    if not os.path.isfile("/opt/tritonserver/backends/python/libtriton_python.so"):
        unavailable("/opt/tritonserver/backends (the frontend's default) does not hold the python backend")
    repo = write_repository(tmp_path_factory.mktemp("openai_models"), ["llm_py"])
    port = free_port()
    log_path = tmp_path_factory.mktemp("openai_log") / "frontend.log"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, frontend_main, "--model-repository", repo, "--tokenizer", tokenizer_dir,
             "--backend", "vllm", "--host", "127.0.0.1", "--openai-port", str(port),
             "--uvicorn-log-level", "warning"],
            stdout=log, stderr=subprocess.STDOUT, env=env)

    def tail():
        return log_path.read_text()[-4000:]

    try:
        deadline = time.monotonic() + 90
        while get(f"http://127.0.0.1:{port}/health/ready") != 200:
            if proc.poll() is not None:
                pytest.fail(f"the OpenAI frontend exited with {proc.returncode}:\n{tail()}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"the OpenAI frontend was not ready after 90 s:\n{tail()}", pytrace=False)
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # main.py shuts the frontend and the server down
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                pytest.fail(f"the OpenAI frontend did not stop within 30 s of SIGINT:\n{tail()}", pytrace=False)


@pytest.fixture
def client(openai_url):
    import openai

    with openai.OpenAI(base_url=openai_url, api_key="unused", max_retries=0, timeout=30) as c:
        yield c


def test_models_list(client):
    assert [m.id for m in client.models.list().data] == ["llm_py"]


def test_completion(client):
    completion = client.completions.create(model="llm_py", prompt="one two three four", max_tokens=3)
    assert completion.object == "text_completion"
    assert completion.model == "llm_py"
    assert len(completion.choices) == 1
    assert completion.choices[0].text == "four three two"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.prompt_tokens == 4
    assert completion.usage.completion_tokens == 3
    assert completion.usage.total_tokens == 7


def test_completion_echo(client):
    completion = client.completions.create(model="llm_py", prompt="hello world", max_tokens=5, echo=True)
    assert completion.choices[0].text == "hello world world hello"


def test_completion_stream(client):
    chunks = list(client.completions.create(model="llm_py", prompt="one two three", max_tokens=16, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "three two one"
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_chat_completion(client):
    """The chat template turns the messages into the prompt the model sees."""
    chat = client.chat.completions.create(
        model="llm_py",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello world"}],
        max_tokens=32,
    )
    assert chat.object == "chat.completion"
    assert chat.model == "llm_py"
    message = chat.choices[0].message
    assert message.role == "assistant"
    # Prompt: "<|system|> be brief\n<|user|> hello world\n<|assistant|>", reversed word by word.
    assert message.content == "<|assistant|> world hello <|user|> brief be <|system|>"
    assert chat.choices[0].finish_reason == "stop"
    assert chat.usage.prompt_tokens == 7
    assert chat.usage.completion_tokens == 7


def test_chat_completion_stream(client):
    stream = client.chat.completions.create(
        model="llm_py", messages=[{"role": "user", "content": "one two"}], max_tokens=2, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "<|assistant|> two"
