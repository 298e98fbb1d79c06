"""Errors from execute: a negative X raises, any other X answers an error response."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if x[0] < 0:
                raise pb_utils.TritonModelException("negative input")
            out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("x must be negative")))
        return out
