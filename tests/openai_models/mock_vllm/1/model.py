"""A deterministic stand-in for an LLM served by Triton's vLLM backend: the same
inputs, outputs and decoupled streaming, and an answer that depends only on the
prompt, so the OpenAI routes can be checked word for word.

The answer is the words "one two three ... twelve", one token each, ending there
(finish reason "stop") or at `max_tokens` ("length"). A prompt that mentions the
weather gets a Hermes-style tool call instead; a request for JSON output
(`structured_outputs`) gets a JSON object. `delay` in the sampling parameters sleeps
before each token; while it sleeps, a cancelled request is noticed, written to the
file named by `cancel_marker`, and ends.
"""
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils

WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve"]
TOOL_CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


def tokens_for(prompt, sampling):
    if "structured_outputs" in sampling:
        return ['{"answer":', ' "one"}']
    if "weather" in prompt:
        return [TOOL_CALL]
    return [w if i == 0 else " " + w for i, w in enumerate(WORDS)]


def flag(request, name, default=False):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else bool(tensor.as_numpy().flatten()[0])


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            self.generate(request)
        return None

    def generate(self, request):
        sender = request.get_response_sender()
        prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().flatten()[0]
        prompt = prompt.decode() if isinstance(prompt, bytes) else str(prompt)
        params = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
        sampling = {}
        if params is not None:
            raw = params.as_numpy().flatten()[0]
            sampling = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
        stream = flag(request, "stream")
        max_tokens = int(sampling.get("max_tokens", 16))
        tokens = tokens_for(prompt, sampling)
        reason = "length" if max_tokens < len(tokens) else "stop"
        tokens = tokens[:max_tokens]
        prompt_tokens = len(prompt.split())

        def response(text, count, first, finish=None):
            outputs = [pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_))]
            if first and flag(request, "return_num_input_tokens"):
                outputs.append(pb_utils.Tensor("num_input_tokens", np.array([prompt_tokens], dtype=np.uint32)))
            if flag(request, "return_num_output_tokens"):
                outputs.append(pb_utils.Tensor("num_output_tokens", np.array([count], dtype=np.uint32)))
            if finish and flag(request, "return_finish_reason"):
                outputs.append(pb_utils.Tensor("finish_reason", np.array([finish.encode()], dtype=np.object_)))
            return pb_utils.InferenceResponse(output_tensors=outputs)

        if not stream:
            sender.send(response("".join(tokens), len(tokens), True, reason),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        delay = float(sampling.get("delay", 0))
        for i, token in enumerate(tokens):
            if delay:
                time.sleep(delay)
            if sender.is_cancelled():
                marker = sampling.get("cancel_marker")
                if marker:
                    with open(marker, "w") as f:
                        f.write(f"cancelled after {i} tokens")
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            sender.send(response(token, 1, i == 0))
        sender.send(response("", 0, False, reason), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
