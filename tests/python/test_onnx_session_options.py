"""The ONNX Runtime memory settings a model's `parameters` give, as Triton's ONNX Runtime
backend reads them (L0_onnx_optimization): `enable_mem_arena`, `enable_mem_pattern`,
`session.use_device_allocator_for_initializers` configure the session,
`memory.enable_memory_arena_shrinkage` every run. Each is logged at the verbose level
with the backend's words, the model answers as before, and a boolean that is not one
fails the load with the backend's message."""

import numpy as np
import tritonclient.http as httpclient
from conftest import add_sub_config, add_sub_inputs


def parameters(**values):
    return "".join(
        f'parameters: {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'
        for key, value in values.items()
    )


MEMORY = parameters(
    **{
        "enable_mem_arena": "1",
        "enable_mem_pattern": "0",
        "session.use_device_allocator_for_initializers": "1",
        "memory.enable_memory_arena_shrinkage": "cpu:0",
    }
)


def test_memory_settings_are_applied_and_logged(make_repo, start_server):
    repo = make_repo(
        [],
        {
            "tuned": add_sub_config("tuned", extra=MEMORY),
            "bad_bool": add_sub_config("bad_bool", extra=parameters(enable_mem_pattern="maybe")),
        },
    )
    srv = start_server(repo, "--log-verbose=1", "--exit-on-error=false")
    log = srv.log()
    for line in (
        "Configuring enable_mem_arena to 1",
        "Configuring enable_mem_pattern to 0",
        "Configuring 'session.use_device_allocator_for_initializers' to '1' for 'tuned'",
        "Configuring memory.enable_memory_arena_shrinkage to cpu:0",
    ):
        assert line in log, line
    client = srv.http_client()
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    result = client.infer("tuned", add_sub_inputs(httpclient, a, a))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - a)
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["bad_bool"]["state"] == "UNAVAILABLE"
    assert "failed to convert 'maybe' to boolean" in index["bad_bool"]["reason"]
