"""BLS: asks the ONNX model `add_sub_onnx` for OUTPUT1 and answers it as DIFF."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [pb_utils.get_input_tensor_by_name(request, n) for n in ("INPUT0", "INPUT1")]
            answer = pb_utils.InferenceRequest(
                model_name="add_sub_onnx", requested_output_names=["OUTPUT1"], inputs=inputs).exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            out = pb_utils.get_output_tensor_by_name(answer, "OUTPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("DIFF", out)]))
        return responses
