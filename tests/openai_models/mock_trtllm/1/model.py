"""A stand-in in the TensorRT-LLM convention: `max_tokens` words of "alpha beta gamma
...", one response per word when streaming, no token counts and no stop handling (the
frontend enforces stop strings); the number of `stop_words` is written in front of the
first word as "[stops:N] " so the test sees what arrived."""
import numpy as np
import triton_python_backend_utils as pb_utils

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            stream = bool(pb_utils.get_input_tensor_by_name(request, "stream").as_numpy().flatten()[0])
            count = int(pb_utils.get_input_tensor_by_name(request, "max_tokens").as_numpy().flatten()[0])
            stops = pb_utils.get_input_tensor_by_name(request, "stop_words")
            prefix = ""
            if stops is not None:
                prefix = f"[stops:{stops.as_numpy().size}] "
            words = [(prefix if i == 0 else " ") + w for i, w in enumerate((WORDS * 4)[:count])]

            def out(text):
                return pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("text_output", np.array([[text.encode()]], dtype=np.object_))])

            if stream:
                for w in words:
                    sender.send(out(w))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                sender.send(out("".join(words)), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
