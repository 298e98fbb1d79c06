"""The LLM metrics of the OpenAI port through the real binary: time to first token, time
per output token, prompt and generated tokens and requests by finish reason, per model
version, with vLLM's names (as Triton's vLLM backend exports them). Each test scrapes
before and after its requests and checks that every sample moved by exactly what the
requests should have moved it, on the metrics port and on the OpenAI port's `/metrics`
alike; the text is read with prometheus_client's parser. The LLM is tests/openai_models'
`mock_vllm` (12 tokens, each in its own streamed response, token counts reported).
"""
import os
import shutil

import openai
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from conftest import REPO_ROOT, THREE_LISTENERS, wait_for
from triton_wheel import python_backend_directory, stub_environment

MODELS = os.path.join(REPO_ROOT, "tests", "openai_models")
pytestmark = pytest.mark.timeout(300)

TTFT = "vllm:time_to_first_token_seconds"
TPOT = "vllm:time_per_output_token_seconds"
PROMPT = "vllm:prompt_tokens_total"
GENERATED = "vllm:generation_tokens_total"
SUCCESS = "vllm:request_success_total"
LABELS = {"model": "mock_vllm", "version": "1"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from conftest import Server, base_args
    backends = python_backend_directory()
    root = tmp_path_factory.mktemp("openai-metrics")
    shutil.copytree(os.path.join(MODELS, "mock_vllm"), root / "mock_vllm",
                    ignore=shutil.ignore_patterns("__pycache__"))
    args = base_args(str(root), ["--backend-directory", backends, "--openai-port", "0",
                                 "--openai-address", "127.0.0.1"])
    srv = Server(str(root), args, env=stub_environment(), expect=THREE_LISTENERS | {"openai"})
    srv.wait_started(timeout=60)
    yield srv
    srv.kill()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.openai_url, api_key="unused", max_retries=0)


def scrape(text):
    """Every sample of the text: (sample name, sorted labels) -> value; also checks that
    each LLM family, once there (a model version appears with its first generation), has
    its HELP and TYPE (the parser keeps them)."""
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, kind in [(TTFT, "histogram"), (TPOT, "histogram"), (PROMPT[:-6], "counter"),
                       (GENERATED[:-6], "counter"), (SUCCESS[:-6], "counter")]:
        if name in families:
            assert families[name].type == kind and families[name].documentation, families[name]
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in families.values() for s in f.samples}


def llm_samples(server):
    """The LLM samples of mock_vllm, read from the metrics port; the OpenAI port's
    `/metrics` must show the same families."""
    port = scrape(server.metrics())
    openai_port = scrape(requests.get(server.openai_url.rsplit("/v1", 1)[0] + "/metrics", timeout=10).text)
    ours = {k: v for k, v in port.items() if k[0].startswith("vllm:")}
    assert {k for k in openai_port if k[0].startswith("vllm:")} == set(ours)
    return ours


def value(samples, name, **extra):
    return samples.get((name, tuple(sorted({**LABELS, **extra}.items()))), 0.0)


def moved(before, after):
    """Each sample's change (only those that changed)."""
    return {k: after[k] - before.get(k, 0.0) for k in after if after[k] != before.get(k, 0.0)}


def check(before, after, prompt, generated, reasons, first_tokens, token_gaps):
    """Every LLM sample of mock_vllm moved by exactly what is given, and no more."""
    delta = moved(before, after)
    got = lambda name, **extra: delta.get((name, tuple(sorted({**LABELS, **extra}.items()))), 0.0)
    assert got(PROMPT) == prompt, delta
    assert got(GENERATED) == generated, delta
    for reason in ("stop", "length", "abort"):
        assert got(SUCCESS, finished_reason=reason) == reasons.get(reason, 0), delta
    for family, count in [(TTFT, first_tokens), (TPOT, token_gaps)]:
        assert got(f"{family}_count") == count, delta
        # Every observation lands in exactly one bucket: +Inf moves by the count, and the
        # cumulative buckets never decrease.
        assert got(f"{family}_bucket", le="+Inf") == count, delta
        buckets = sorted((float(dict(k[1])["le"]), v) for k, v in after.items()
                         if k[0] == f"{family}_bucket" and dict(k[1])["model"] == "mock_vllm")
        assert [v for _, v in buckets] == sorted(v for _, v in buckets), buckets
        if count:
            assert got(f"{family}_sum") > 0, delta
        else:
            assert got(f"{family}_sum") == 0, delta


def test_a_streamed_completion_moves_every_sample_by_its_tokens(server, client):
    before = llm_samples(server)
    chunks = list(client.completions.create(model="mock_vllm", prompt="count to five", max_tokens=5,
                                            stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "one two three four five"
    after = llm_samples(server)
    # Prompt: 3 words; 5 tokens in 5 responses: one first token, 4 gaps; cut by max_tokens.
    check(before, after, prompt=3, generated=5, reasons={"length": 1}, first_tokens=1, token_gaps=4)


def test_a_streamed_chat_with_two_choices_counts_each(server, client):
    before = llm_samples(server)
    chunks = list(client.chat.completions.create(
        model="mock_vllm", messages=[{"role": "user", "content": "count"}], max_tokens=20, n=2, stream=True))
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop", "stop"]
    after = llm_samples(server)
    # Two choices of all 12 tokens; the prompt is the chat template's text, counted once per choice
    # as vLLM does (each choice is a request to the model).
    prompt = value(after, PROMPT) - value(before, PROMPT)
    assert prompt > 0 and prompt % 2 == 0
    check(before, after, prompt=prompt, generated=24, reasons={"stop": 2}, first_tokens=2, token_gaps=22)


def test_a_whole_completion_counts_tokens_but_no_token_times(server, client):
    before = llm_samples(server)
    r = client.completions.create(model="mock_vllm", prompt="count", max_tokens=20)
    assert r.choices[0].finish_reason == "stop"
    after = llm_samples(server)
    # The model answers once: there are no token times to tell.
    check(before, after, prompt=1, generated=12, reasons={"stop": 1}, first_tokens=0, token_gaps=0)


def test_a_client_that_goes_away_is_counted_as_abort(server):
    before = llm_samples(server)
    body = {"model": "mock_vllm", "prompt": "count slowly", "max_tokens": 12, "stream": True, "delay": 0.2}
    with requests.post(server.openai_url + "/completions", json=body, stream=True, timeout=30) as r:
        first = next(line for line in r.iter_lines() if line)
        assert first.startswith(b"data: ")
    wait_for(lambda: value(llm_samples(server), SUCCESS, finished_reason="abort")
             == value(before, SUCCESS, finished_reason="abort") + 1,
             timeout=10, what="the run to be counted as abort")
    after = llm_samples(server)
    delta = moved(before, after)
    assert value(after, PROMPT) - value(before, PROMPT) == 2, delta
    generated = value(after, GENERATED) - value(before, GENERATED)
    first = value(after, f"{TTFT}_count") - value(before, f"{TTFT}_count")
    gaps = value(after, f"{TPOT}_count") - value(before, f"{TPOT}_count")
    # Cancelled after a token or two: what arrived is counted, each token timed.
    assert 1 <= generated < 12 and first == 1 and gaps == generated - 1, delta
    for reason in ("stop", "length"):
        assert value(after, SUCCESS, finished_reason=reason) == value(before, SUCCESS, finished_reason=reason)


def test_the_families_are_written_once_with_help_and_type(server, client):
    client.completions.create(model="mock_vllm", prompt="count", max_tokens=1)
    text = server.metrics()
    for family in (TTFT, TPOT, PROMPT, GENERATED, SUCCESS):
        assert text.count(f"# TYPE {family} ") == 1, family
        assert text.count(f"# HELP {family} ") == 1, family
    # vLLM's bucket bounds, as its Python client writes them.
    assert f'{TTFT}_bucket{{model="mock_vllm",version="1",le="0.001"}}' in text
    assert f'{TPOT}_bucket{{model="mock_vllm",version="1",le="2.5"}}' in text
    assert f'{TTFT}_bucket{{model="mock_vllm",version="1",le="10.0"}}' in text
