"""A deterministic stand-in for an LLM behind Triton's vLLM backend tensors.

Tokens are the prompt's whitespace-separated words; the "generation" is the prompt's
words in reverse order, at most sampling_parameters["max_tokens"] of them. With
stream = true each word is its own response (" word" after the first), else one
response holds the whole text. exclude_input_in_output = false puts the prompt first.
num_input_tokens / num_output_tokens are returned when asked for, as vLLM does.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def flag(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else bool(tensor.as_numpy().flatten()[0])


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().flatten()[0]
            prompt = prompt.decode() if isinstance(prompt, bytes) else str(prompt)
            params = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
            params = json.loads(params.as_numpy().flatten()[0]) if params is not None else {}
            words = prompt.split()
            generated = list(reversed(words))[: int(params.get("max_tokens", 16))]
            stream = flag(request, "stream", False)
            pieces = [(" " if i else "") + w for i, w in enumerate(generated)] if stream else [" ".join(generated)]
            if not flag(request, "exclude_input_in_output", True):
                pieces[0] = prompt + " " + pieces[0]
            with_counts = flag(request, "return_num_input_tokens", False)
            for i, piece in enumerate(pieces):
                outputs = [pb_utils.Tensor("text_output", np.array([piece.encode()], dtype=np.object_))]
                if with_counts:
                    outputs.append(pb_utils.Tensor("num_input_tokens", np.array([len(words)], dtype=np.uint32)))
                    count = len(generated) if not stream else 1
                    outputs.append(pb_utils.Tensor("num_output_tokens", np.array([count], dtype=np.uint32)))
                last = i == len(pieces) - 1
                sender.send(pb_utils.InferenceResponse(output_tensors=outputs),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0)
        return None
