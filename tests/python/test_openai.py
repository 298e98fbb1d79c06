"""The OpenAI-compatible port (`--openai-port`) through the real binary and the official
`openai` client: models, completions and chat (whole and streamed, `n`, `stop`,
`max_tokens` -> `length`, usage, echo), tool calls, JSON output, embeddings, and errors
in OpenAI's shape. The LLMs are Python models of our own in the tensor conventions of
Triton's vLLM backend (`mock_vllm`) and TensorRT-LLM models (`mock_trtllm`), served by
Triton's python backend (tests/openai_models); the embedding model is a tiny ONNX
transformer with a word-level tokenizer, made here.
"""
import base64
import json
import math
import os
import shutil
import struct

import onnx
import openai
import pytest
import requests
from onnx import TensorProto, helper

from conftest import REPO_ROOT, THREE_LISTENERS, wait_for
from triton_wheel import python_backend_directory, stub_environment

MODELS = os.path.join(REPO_ROOT, "tests", "openai_models")
WORDS = "one two three four five six seven eight nine ten eleven twelve".split()
pytestmark = pytest.mark.timeout(600)

# A word-level tokenizer (Hugging Face `tokenizers` JSON) for the embedding model.
VOCAB = {"[UNK]": 0, "hello": 1, "world": 2, "nereid": 3}
TOKENIZER = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [],
    "normalizer": None,
    "pre_tokenizer": {"type": "Whitespace"},
    "post_processor": None,
    "decoder": None,
    "model": {"type": "WordLevel", "vocab": VOCAB, "unk_token": "[UNK]"},
}
SCALE = [1.0, 2.0, 3.0, 4.0]


def embedding_model(root):
    """`embed`: hidden state of token t = t * [1, 2, 3, 4] (times its attention mask)."""
    folder = root / "embed"
    (folder / "1").mkdir(parents=True)
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, [None, None])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [None, None])
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [None, None, 4])
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [4], SCALE)
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [2])
    nodes = [
        helper.make_node("Mul", ["input_ids", "attention_mask"], ["masked"]),
        helper.make_node("Cast", ["masked"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["f", "axes"], ["u"]),
        helper.make_node("Mul", ["u", "scale"], ["last_hidden_state"]),
    ]
    graph = helper.make_graph(nodes, "embed", [ids, mask], [out], initializer=[scale, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(folder / "1" / "model.onnx"))
    (folder / "config.pbtxt").write_text(
        'name: "embed"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
        'input [ { name: "input_ids" data_type: TYPE_INT64 dims: [ -1, -1 ] },\n'
        '        { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1, -1 ] } ]\n'
        'output [ { name: "last_hidden_state" data_type: TYPE_FP32 dims: [ -1, -1, 4 ] } ]\n'
        'parameters { key: "openai_task" value: { string_value: "embeddings" } }\n'
    )
    (folder / "tokenizer.json").write_text(json.dumps(TOKENIZER))


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("openai")
    for name in ("mock_vllm", "mock_trtllm"):
        shutil.copytree(os.path.join(MODELS, name), root / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    embedding_model(root)
    return root


@pytest.fixture(scope="module")
def backends():
    return python_backend_directory()


def start(repo, backends, *extra):
    from conftest import Server, base_args
    args = base_args(str(repo), ["--backend-directory", backends, "--openai-port", "0",
                                 "--openai-address", "127.0.0.1", *extra])
    server = Server(str(repo), args, env=stub_environment(), expect=THREE_LISTENERS | {"openai"})
    return server.wait_started(timeout=60)


@pytest.fixture(scope="module")
def server(repo, backends):
    srv = start(repo, backends, "--tool-call-parser", "hermes")
    yield srv
    srv.kill()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.openai_url, api_key="unused", max_retries=0)


def words(count):
    return " ".join(WORDS[:count])


def test_models_lists_the_llms_and_the_embedding_model(client):
    ids = sorted(m.id for m in client.models.list().data)
    assert ids == ["embed", "mock_trtllm", "mock_vllm"]
    model = client.models.retrieve("mock_vllm")
    assert (model.id, model.object) == ("mock_vllm", "model")


def test_completion_whole(client):
    r = client.completions.create(model="mock_vllm", prompt="count for me", max_tokens=20)
    assert r.object == "text_completion" and r.model == "mock_vllm"
    assert len(r.choices) == 1
    choice = r.choices[0]
    assert (choice.index, choice.text, choice.finish_reason) == (0, words(12), "stop")
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (3, 12, 15)


def test_max_tokens_ends_with_length(client):
    r = client.completions.create(model="mock_vllm", prompt="count", max_tokens=3)
    assert (r.choices[0].text, r.choices[0].finish_reason) == (words(3), "length")
    assert r.usage.completion_tokens == 3


def test_default_max_tokens_is_tritons_16(client):
    chunks = list(client.completions.create(model="mock_trtllm", prompt="go", stream=True))
    assert len("".join(c.choices[0].text for c in chunks).split()) == 16
    assert chunks[-1].choices[0].finish_reason == "length"


def test_stop_strings_end_the_text_before_them(client):
    r = client.completions.create(model="mock_vllm", prompt="count", max_tokens=20, stop=[" five", "x"])
    assert (r.choices[0].text, r.choices[0].finish_reason) == (words(4), "stop")
    # Streamed, the stop string spans two tokens and is held back until it is whole.
    chunks = client.completions.create(model="mock_vllm", prompt="count", max_tokens=20,
                                       stop="four fi", stream=True)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == words(3) + " "


def test_n_and_several_prompts_give_every_choice(client):
    r = client.completions.create(model="mock_vllm", prompt=["a", "b c"], n=2, max_tokens=2)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert all(c.text == words(2) for c in r.choices)
    # Prompt tokens once per prompt (1 + 2), completion tokens for all four choices.
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (3, 8)


def test_echo_puts_the_prompt_first(client):
    r = client.completions.create(model="mock_vllm", prompt="say:", max_tokens=2, echo=True)
    assert r.choices[0].text == "say:" + words(2)


def test_completion_streamed_with_usage(client):
    chunks = list(client.completions.create(model="mock_vllm", prompt="count", max_tokens=5, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == words(5)
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert reasons == ["length"]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and (usage.prompt_tokens, usage.completion_tokens) == (1, 5)


def test_trtllm_convention_gets_its_tensors_and_usage_is_counted(client):
    r = client.completions.create(model="mock_trtllm", prompt="go", max_tokens=3, stop=["zzz", "yyy"])
    assert r.choices[0].text == "[stops:2] alpha beta gamma"
    # The model reports no counts: one token per word it sent.
    assert r.usage.completion_tokens == 1
    chunks = client.completions.create(model="mock_trtllm", prompt="go", max_tokens=4, stream=True,
                                       stream_options={"include_usage": True})
    chunks = list(chunks)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "alpha beta gamma delta"
    assert chunks[-1].usage.completion_tokens == 4


def test_chat_whole_and_streamed(client):
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "count"}, {"type": "text", "text": "now"}]}]
    r = client.chat.completions.create(model="mock_vllm", messages=messages, max_completion_tokens=4)
    assert r.object == "chat.completion"
    msg = r.choices[0].message
    assert (msg.role, msg.content, r.choices[0].finish_reason) == ("assistant", words(4), "length")
    # The template's text split on white space, as the model counts:
    # "<s><|system|>be", "brief", "<|user|>count", "now", "<|assistant|>".
    assert r.usage.prompt_tokens == 5
    chunks = list(client.chat.completions.create(model="mock_vllm", messages=messages, max_tokens=20,
                                                 stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert content == words(12)
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_tool_calls_are_parsed(client):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "weather",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]
    messages = [{"role": "user", "content": "what is the weather in Paris?"}]
    r = client.chat.completions.create(model="mock_vllm", messages=messages, tools=tools, max_tokens=50)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert (call.type, call.function.name) == ("function", "get_weather")
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id.startswith("call_")
    chunks = list(client.chat.completions.create(model="mock_vllm", messages=messages, tools=tools,
                                                 max_tokens=50, stream=True))
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [c.function.name for c in calls] == ["get_weather"]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_json_output_reaches_a_vllm_model_and_is_refused_by_others(client):
    r = client.chat.completions.create(model="mock_vllm", messages=[{"role": "user", "content": "x"}],
                                       response_format={"type": "json_object"})
    assert json.loads(r.choices[0].message.content) == {"answer": "one"}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="mock_trtllm", messages=[{"role": "user", "content": "x"}],
                                       response_format={"type": "json_object"})
    assert "no chat template" in str(e.value) or "guided decoding" in str(e.value)


def test_embeddings_pooled_and_normalized(client):
    r = client.embeddings.create(model="embed", input=["hello world", "nereid"])
    assert [d.index for d in r.data] == [0, 1]
    # hello=1, world=2: mean of [1,2,3,4] and [2,4,6,8], normalized.
    mean = [1.5 * s for s in SCALE]
    norm = math.sqrt(sum(v * v for v in mean))
    assert r.data[0].embedding == pytest.approx([v / norm for v in mean], rel=1e-6)
    norm3 = math.sqrt(sum((3 * s) ** 2 for s in SCALE))
    assert r.data[1].embedding == pytest.approx([3 * s / norm3 for s in SCALE], rel=1e-6)
    assert (r.usage.prompt_tokens, r.usage.total_tokens) == (3, 3)
    b64 = client.embeddings.create(model="embed", input="hello", encoding_format="base64")
    raw = b64.data[0].embedding
    values = raw if isinstance(raw, list) else list(struct.unpack("<4f", base64.b64decode(raw)))
    assert values == pytest.approx([s / math.sqrt(30) for s in SCALE], rel=1e-6)


def test_errors_have_openais_shape(server, client):
    # Triton's frontend: 400 "Unknown model", its message also as FastAPI's `detail`.
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="nope", prompt="x")
    assert e.value.body["code"] == "model_not_found"
    base = server.openai_url
    r = requests.post(base + "/completions", json={"model": "nope", "prompt": "x"})
    assert (r.status_code, r.json()["detail"]) == (400, "Unknown model: nope")
    r = requests.get(base + "/models/nope")
    assert (r.status_code, r.json()["error"]["code"]) == (404, "model_not_found")
    r = requests.post(base + "/completions", data=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    r = requests.post(base + "/completions", json={"model": "mock_vllm", "prompt": "x", "temperature": 5})
    assert (r.status_code, r.json()["error"]["param"]) == (400, "temperature")
    r = requests.post(base + "/embeddings", json={"model": "mock_vllm", "input": "x"})
    assert r.status_code == 400
    r = requests.post(base + "/chat/completions",
                      json={"model": "mock_vllm", "messages": [{"role": "user", "content": [
                          {"type": "image_url", "image_url": {"url": "data:,"}}]}]})
    assert r.status_code == 400 and "image_url" in r.json()["error"]["message"]
    # Unknown fields are accepted (vLLM's sampling extras reach the model).
    r = requests.post(base + "/completions", json={"model": "mock_vllm", "prompt": "x", "max_tokens": 1,
                                                   "ignore_eos": True})
    assert r.status_code == 200, r.text
    assert requests.get(base.rsplit("/v1", 1)[0] + "/health/ready").status_code == 200
    metrics = requests.get(base.rsplit("/v1", 1)[0] + "/metrics").text
    assert 'nv_inference_request_success{model="mock_vllm"' in metrics


def test_a_client_that_disconnects_cancels_its_request(server, tmp_path):
    marker = tmp_path / "cancelled"
    body = {"model": "mock_vllm", "prompt": "count", "max_tokens": 12, "stream": True,
            "delay": 0.2, "cancel_marker": str(marker)}
    with requests.post(server.openai_url + "/completions", json=body, stream=True, timeout=30) as r:
        lines = r.iter_lines()
        first = next(line for line in lines if line)
        assert first.startswith(b"data: ")
    # The connection is closed: the model sees the request cancelled at its next token.
    wait_for(lambda: marker.exists(), timeout=10, what="the model to see the cancellation")
    assert "cancelled after" in marker.read_text()


def test_keys_size_limit_and_strict_mode(repo, backends, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# one key per line\nsecret-2\n")
    srv = start(repo, backends, "--openai-api-key", "secret-1", "--openai-api-key-file", str(keys),
                "--openai-strict", "--openai-max-request-size", "1000")
    try:
        base = srv.openai_url
        with pytest.raises(openai.AuthenticationError) as e:
            openai.OpenAI(base_url=base, api_key="wrong", max_retries=0).models.list()
        assert e.value.status_code == 401 and e.value.body["code"] == "invalid_api_key"
        for key in ("secret-1", "secret-2"):
            c = openai.OpenAI(base_url=base, api_key=key, max_retries=0)
            assert c.completions.create(model="mock_vllm", prompt="x", max_tokens=1).choices[0].text == "one"
        headers = {"Authorization": "Bearer secret-1"}
        r = requests.post(base + "/completions", headers=headers,
                          json={"model": "mock_vllm", "prompt": "x" * 2000})
        assert r.status_code == 413 and r.json()["error"]["code"] == "content_too_large"
        assert "Use --openai-max-request-size to increase" in r.json()["error"]["message"]
        r = requests.post(base + "/completions", headers=headers,
                          json={"model": "mock_vllm", "prompt": "x", "ignore_eos": True})
        assert r.status_code == 400 and r.json()["error"]["param"] == "ignore_eos"
        # Health and metrics need no key.
        assert requests.get(base.rsplit("/v1", 1)[0] + "/health/ready").status_code == 200
    finally:
        srv.kill()
