"""Decoupled: COUNT responses per request, OUT = IN and INDEX = i (python backend)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            sender = request.get_response_sender()
            for i in range(count):
                index = np.array([i], dtype=np.int32)
                sender.send(
                    pb_utils.InferenceResponse(
                        output_tensors=[
                            pb_utils.Tensor("OUT", data),
                            pb_utils.Tensor("INDEX", index),
                        ]
                    )
                )
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
