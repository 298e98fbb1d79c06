"""`nv_inference_first_response_histogram_ms` (`--metrics-config histogram_latencies=true`,
Triton 2.52+), read from the metrics port with prometheus_client.

Triton (core `src/infer_response.cc`, `InferenceResponse::UpdateResponseMetrics`)
observes, per request, the first response sent (`responses_sent_` goes from 0 to 1), in
whole milliseconds since the request's response factory was made as it entered the
server; a final flag sent alone (`SendFlags`) is no response and is not observed. The
default bounds are 100, 500, 2000 and 5000 ms (`src/metric_model_reporter.h`) and a model
may set its own in `model_metrics` (`MetricReporterConfig::ParseConfig`). Checked with a
normal model (ONNX add_sub; a python add_sub that sleeps before answering) and with
decoupled python-backend models that send several responses, the later ones late.
"""

import os
import shutil

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from conftest import REPO_ROOT

FAMILY = "nv_inference_first_response_histogram_ms"
HELP = "Duration from request to first response in milliseconds"
PY_MODELS = os.path.join(REPO_ROOT, "tests", "python_backend_models")

# Decoupled: IN = n sends n responses, the first at once and each later one 0.4 s after
# the one before, then the final flag alone.
SLOW_STREAM = '''
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            for i in range(n):
                if i:
                    time.sleep(0.4)
                sender.send(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''


def buckets(values):
    return ("model_metrics { metric_control: [ { metric_identifier: { family: "
            f'"{FAMILY}" }} histogram_options: {{ buckets: [ {", ".join(map(str, values))} ] }} }} ] }}\n')


def histogram(server, model):
    """{le: cumulative count}, count and sum of `model`'s first-response histogram, or
    None when the family is absent."""
    families = {f.name: f for f in text_string_to_metric_families(server.metrics())}
    family = families.get(FAMILY)
    if family is None:
        return None
    assert family.type == "histogram" and family.documentation == HELP, family
    samples = [s for s in family.samples if s.labels.get("model") == model]
    assert samples, f"no samples for {model}: {family.samples}"
    assert all(s.labels["version"] == "1" for s in samples)
    le = {s.labels["le"]: s.value for s in samples if s.name == FAMILY + "_bucket"}
    count = [s.value for s in samples if s.name == FAMILY + "_count"]
    total = [s.value for s in samples if s.name == FAMILY + "_sum"]
    return le, count[0], total[0]


def add_sub(client, module, model):
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = module.InferInput(name, [1, 4], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
        inputs.append(tensor)
    result = client.infer(model, inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 4), 2, np.float32))


def test_off_by_default_and_default_buckets_for_a_normal_model(make_repo, start_server):
    repo = make_repo(["add_sub"])
    assert histogram(start_server(repo), "add_sub") is None
    server = start_server(repo, "--metrics-config", "histogram_latencies=true")
    le, count, _ = histogram(server, "add_sub")
    assert (le, count) == ({"100": 0, "500": 0, "2000": 0, "5000": 0, "+Inf": 0}, 0)
    http, grpc_ = server.http_client(), server.grpc_client()
    try:
        add_sub(http, httpclient, "add_sub")
        add_sub(grpc_, grpcclient, "add_sub")
    finally:
        http.close()
        grpc_.close()
    le, count, _ = histogram(server, "add_sub")
    assert count == 2 and le["+Inf"] == 2 and le["5000"] == 2, le


def test_model_metrics_with_bad_buckets_fail_the_load(make_repo, start_server):
    from conftest import add_sub_config

    repo = make_repo(["add_sub"], {"unsorted": add_sub_config("unsorted", extra=buckets([5, 1]))})
    server = start_server(repo, "--metrics-config", "histogram_latencies=true", "--exit-on-error=false")
    index = {m["name"]: m for m in server.http_client().get_model_repository_index()}
    assert index["unsorted"]["state"] == "UNAVAILABLE"
    assert "strictly increasing" in index["unsorted"]["reason"], index["unsorted"]
    # The server keeps serving its other models.
    assert histogram(server, "add_sub")[1] == 0


@pytest.fixture(scope="module")
def pyserver(tmp_path_factory):
    from conftest import Server, base_args
    from triton_wheel import python_backend_directory, stub_environment

    directory, env = python_backend_directory(), stub_environment()
    root = tmp_path_factory.mktemp("first_response_models")
    shutil.copytree(os.path.join(PY_MODELS, "repeat_py"), root / "repeat_py",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (root / "slow_stream" / "1").mkdir(parents=True)
    (root / "slow_stream" / "1" / "model.py").write_text(SLOW_STREAM)
    (root / "slow_stream" / "config.pbtxt").write_text(
        (root / "repeat_py" / "config.pbtxt").read_text().replace('"repeat_py"', '"slow_stream"')
        + buckets([200, 5000]))
    shutil.copytree(os.path.join(PY_MODELS, "add_sub_py"), root / "slow_add_sub",
                    ignore=shutil.ignore_patterns("__pycache__"))
    config = root / "slow_add_sub" / "config.pbtxt"
    config.write_text(config.read_text().replace('"add_sub_py"', '"slow_add_sub"')
                      + 'parameters { key: "delay_seconds" value { string_value: "0.3" } }\n'
                      + buckets([100, 1000]))
    prefix = f"nereid_first_response_{os.getpid()}_"
    srv = Server(str(root), base_args(str(root), [
        "--backend-directory", directory, "--metrics-config", "histogram_latencies=true",
        "--backend-config", f"python,shm-region-prefix-name={prefix}"]), env=env)
    try:
        srv.wait_started(timeout=120)
        yield srv
    finally:
        srv.kill()
        for name in os.listdir("/dev/shm"):
            if name.startswith(prefix):
                os.unlink(os.path.join("/dev/shm", name))


def stream(server, model, counts):
    """Sends one request per n in `counts` to the decoupled `model` on one gRPC stream
    and waits for all their responses (and the empty finals the n = 0 ones ask for)."""
    import queue

    client = server.grpc_client()
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for i, n in enumerate(counts):
            tensor = grpcclient.InferInput("IN", [1], "INT32")
            tensor.set_data_from_numpy(np.array([n], np.int32))
            client.async_stream_infer(model, [tensor], request_id=str(i), enable_empty_final_response=n == 0)
        for _ in range(sum(counts) + counts.count(0)):
            result, error = answers.get(timeout=30)
            assert error is None, error
    finally:
        client.stop_stream()
        client.close()


def test_decoupled_model_observes_each_requests_first_response_once(pyserver):
    # Three requests of 3 responses and one that sends the final flag alone: three
    # observations, each taken at the request's first response.
    stream(pyserver, "repeat_py", [3, 3, 0, 3])
    le, count, _ = histogram(pyserver, "repeat_py")
    assert count == 3 and le["+Inf"] == 3, le


def test_decoupled_model_is_timed_to_its_first_response_not_its_last(pyserver):
    # The last of 3 responses comes 0.8 s after the first; the first comes at once.
    stream(pyserver, "slow_stream", [3])
    le, count, total = histogram(pyserver, "slow_stream")
    assert set(le) == {"200", "5000", "+Inf"}
    assert (count, le["200"], le["+Inf"]) == (1, 1, 1), (le, total)
    assert total < 200


def test_normal_model_is_timed_to_its_one_response(pyserver):
    # The model sleeps 0.3 s before answering: observed between 100 and 1000 ms.
    client = pyserver.http_client()
    try:
        add_sub(client, httpclient, "slow_add_sub")
    finally:
        client.close()
    le, count, total = histogram(pyserver, "slow_add_sub")
    assert (count, le["100"], le["1000"], le["+Inf"]) == (1, 0, 1, 1), le
    assert 300 <= total < 1000 and total == int(total), total
