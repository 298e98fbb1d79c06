"""A running sum kept in the sequence's implicit state: OUTPUT = OUTPUT_STATE =
INPUT_STATE + INPUT."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            state = pb_utils.get_input_tensor_by_name(request, "INPUT_STATE").as_numpy()
            total = state + pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT", total), pb_utils.Tensor("OUTPUT_STATE", total)]))
        return responses
