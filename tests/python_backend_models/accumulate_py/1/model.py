"""A running sum per correlation ID, kept by the model from its control inputs.

OUTPUT is the sum so far (START resets it, END forgets it); FLAGS shows what the
sequence batcher sent: START + 2 * END + 4 * READY.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


def scalar(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().flatten()[0])


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            start, end, ready = (scalar(request, n) for n in ("START", "END", "READY"))
            corrid = scalar(request, "CORRID")
            total = (0 if start else self.sums.get(corrid, 0)) + scalar(request, "INPUT")
            self.sums[corrid] = total
            if end:
                del self.sums[corrid]
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT", np.array([[total]], dtype=np.int32)),
                pb_utils.Tensor("FLAGS", np.array([[start + 2 * end + 4 * ready]], dtype=np.int32)),
            ]))
        return responses
