"""Decoupled: N = n sends n responses OUT = 0 .. n-1 (DELAY_MS apart when given), then the
final flag alone. A cancelled request stops at the next response with a CANCELLED error
(the final response)."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            delay = pb_utils.get_input_tensor_by_name(request, "DELAY_MS")
            delay = 0.0 if delay is None else int(delay.as_numpy()[0]) / 1000.0
            sender = request.get_response_sender()
            for i in range(n):
                if request.is_cancelled():
                    sender.send(
                        pb_utils.InferenceResponse(
                            error=pb_utils.TritonError("cancelled after %d responses" % i,
                                                       pb_utils.TritonError.CANCELLED)),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                    break
                if delay:
                    time.sleep(delay)
                sender.send(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]))
            else:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
