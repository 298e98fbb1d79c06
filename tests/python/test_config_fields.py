"""Model configuration fields Nereid cannot honour, through the binary: a model that
sets a refused field fails its load naming the field while the others serve; a field
without effect is accepted and named in a warning (docs/src/reference/model-config.md,
"Model configuration fields")."""

import numpy as np
import tritonclient.http as httpclient

from conftest import add_sub_config


def test_a_refused_field_fails_that_model_naming_it(make_repo, start_server):
    repo = make_repo(["add_sub"], {
        "with_openvino": add_sub_config(
            "with_openvino",
            extra='optimization { execution_accelerators { cpu_execution_accelerator [ { name: "openvino" } ] } }\n'),
        "with_cuda_graphs": add_sub_config(
            "with_cuda_graphs", extra="optimization { cuda { graphs: true } }\n"),
    })
    srv = start_server(repo, "--exit-on-error=false")
    client = srv.http_client()
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["with_openvino"]["state"] == "UNAVAILABLE"
    assert ("model 'with_openvino': configuration field 'optimization.execution_accelerators."
            "cpu_execution_accelerator' is not supported") in index["with_openvino"]["reason"]
    # Accepted without effect: it serves, and the log names the field once.
    assert index["with_cuda_graphs"]["state"] == "READY"
    assert "configuration field 'optimization.cuda' has no effect" in srv.log()
    a = np.ones((1, 4), np.float32)
    inputs = [httpclient.InferInput("INPUT0", [1, 4], "FP32"), httpclient.InferInput("INPUT1", [1, 4], "FP32")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    assert (client.infer("with_cuda_graphs", inputs).as_numpy("OUTPUT0") == a + a).all()
    assert (client.infer("add_sub", inputs).as_numpy("OUTPUT1") == a - a).all()
