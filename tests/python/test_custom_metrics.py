"""Custom metrics a python model registers through Triton's python backend
(`pb_utils.MetricFamily`, i.e. `TRITONSERVER_MetricFamilyNew` / `MetricNewWithArgs` /
`MetricObserve` ...), through the binary: counters and histograms appear in `/metrics` as
Triton writes them. What a kind does not support is refused by the C functions (their
unit tests in crates/triton-abi/src/metrics); it is not driven from a python model here,
because the wheel's python backend (Triton 2.51's, the same in the real tritonserver)
aborts now and then with `boost::interprocess::lock_exception` when a metric call fails
(python_backend's `custom_metrics` QA crashes Triton 2.51 the same way on this machine).
"""

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from conftest import ADD_SUB_IO
from test_rate_limiter import backends  # noqa: F401  (the python backend fixture)

pytestmark = pytest.mark.timeout(300)

MODEL_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # The families live as long as their metrics (the backend checks).
        self.family = family = pb_utils.MetricFamily(name="test_latency_ms", description="Latency",
                                                     kind=pb_utils.MetricFamily.HISTOGRAM)
        self.latency = family.Metric(labels={"model": "observing"}, buckets=[1.0, 5.0])
        self.counters = counters = pb_utils.MetricFamily(name="test_requests", description="Requests",
                                                         kind=pb_utils.MetricFamily.COUNTER)
        self.requests = counters.Metric(labels={"model": "observing"})

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            self.latency.observe(float(value[0]))
            self.requests.increment(1)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return responses
'''


def write_python_model(model, code):
    """A python model at `model` (one FP32 input IN, one output OUT) running `code`."""
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('''backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
''')
    (model / "1" / "model.py").write_text(code)


def test_histograms_and_counters_of_a_python_model(backends, tmp_path, start_server):  # noqa: F811
    directory, env = backends
    write_python_model(tmp_path / "observing", MODEL_PY)
    srv = start_server(str(tmp_path), "--backend-directory", directory, env=env)
    client = srv.http_client()
    for value in (0.5, 3.0, 9.0):
        tensor = httpclient.InferInput("IN", [1], "FP32")
        tensor.set_data_from_numpy(np.array([value], np.float32))
        assert client.infer("observing", [tensor]).as_numpy("OUT")[0] == value
    text = srv.metrics()
    expected = """# TYPE test_latency_ms histogram
test_latency_ms_count{model="observing"} 3
test_latency_ms_sum{model="observing"} 12.5
test_latency_ms_bucket{model="observing",le="1"} 1
test_latency_ms_bucket{model="observing",le="5"} 2
test_latency_ms_bucket{model="observing",le="+Inf"} 3
"""
    assert expected in text, text
    assert 'test_requests{model="observing"} 3\n' in text, text


HOSTILE_PY = '''
import triton_python_backend_utils as pb_utils

HOSTILE = 'line one\\nline "two" with a back\\\\slash'


class TritonPythonModel:
    def initialize(self, args):
        self.family = family = pb_utils.MetricFamily(name="test_hostile", description=HOSTILE,
                                                     kind=pb_utils.MetricFamily.GAUGE)
        self.gauge = family.Metric(labels={"note": HOSTILE, "plain": "p"})
        self.gauge.set(2.5)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
                for r in requests]
'''

def test_hostile_help_and_label_text_still_parses(backends, make_repo, start_server):  # noqa: F811
    """A plugin's description and label values with newlines, quotes and backslashes, and a
    model whose name holds them too, are escaped by the one Prometheus writer: the whole
    scrape parses with Prometheus' own text parser and every text comes back as written."""
    from prometheus_client.parser import text_string_to_metric_families

    directory, env = backends
    hostile = 'line one\nline "two" with a back\\slash'
    # An ONNX model: Triton's python backend starts its stub through a shell line, which a
    # quote in the model's path breaks (Triton's limitation, not the metrics').
    model_name = 'quote"back\\slash'
    repo = make_repo([], {model_name: f'backend: "onnxruntime"\nmax_batch_size: 8\n{ADD_SUB_IO}'})
    write_python_model(Path(repo) / "hostile", HOSTILE_PY)
    srv = start_server(repo, "--backend-directory", directory, env=env)
    families = {f.name: f for f in text_string_to_metric_families(srv.metrics())}
    family = families["test_hostile"]
    assert family.documentation == hostile
    assert family.type == "gauge"
    assert [(s.labels, s.value) for s in family.samples] == [({"note": hostile, "plain": "p"}, 2.5)]
    success = families["nv_inference_request_success"]
    assert {"model": model_name, "version": "1"} in [s.labels for s in success.samples]
