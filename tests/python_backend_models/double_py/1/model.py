"""DOUBLED = 2 * X: the python step of mixed_ensemble."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "DOUBLED", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 2)]) for r in requests]
