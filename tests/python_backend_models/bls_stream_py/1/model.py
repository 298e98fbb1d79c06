"""BLS to a decoupled model: collects every OUT that repeat_py streams for IN."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            n = pb_utils.get_input_tensor_by_name(request, "IN")
            values = []
            for answer in pb_utils.InferenceRequest(
                    model_name="repeat_py", requested_output_names=["OUT"], inputs=[n]).exec(decoupled=True):
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                out = pb_utils.get_output_tensor_by_name(answer, "OUT")
                if out is not None:
                    values.append(int(out.as_numpy()[0]))
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("SEEN", np.array(values, dtype=np.int32))]))
        return responses
