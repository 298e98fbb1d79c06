"""The metric families `--metrics-config` and `--metrics-interval-ms` control, the
pending-request gauge and the model load time, read from the metrics port with
Prometheus's own parser (prometheus_client), as a Prometheus server would read them.

Names, help texts, types and labels are Triton 2.51's (core r24.10 `src/metrics.cc`,
`src/metric_model_reporter.cc`); `nv_model_load_duration_secs` is Triton's name from
2.52 on (2.51 has no load-time family).
"""

import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from conftest import add_sub_config, base_args, wait_for

LATENCY_COUNTERS = [
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
]
SUMMARIES = [
    "nv_inference_request_summary_us",
    "nv_inference_queue_summary_us",
    "nv_inference_compute_input_summary_us",
    "nv_inference_compute_infer_summary_us",
    "nv_inference_compute_output_summary_us",
]
MODEL = {"model": "add_sub", "version": "1"}


def families(server):
    """{family name: Metric} parsed from the metrics port by prometheus_client."""
    return {f.name: f for f in text_string_to_metric_families(server.metrics())}


def model_samples(family, name=None):
    """The family's samples (of sample name `name`, default the family's) for add_sub.
    prometheus_client names a counter's samples `<family>_total`."""
    name = name or (family.name + "_total" if family.type == "counter" else family.name)
    return [
        s for s in family.samples
        if s.name == name and {k: s.labels[k] for k in MODEL if k in s.labels} == MODEL
    ]


def value(family, name=None):
    samples = model_samples(family, name)
    assert len(samples) == 1, f"{family.name}: {samples}"
    return samples[0].value


def drive(server, count):
    """`count` add_sub requests, alternately over HTTP and gRPC."""
    http = server.http_client()
    grpc_ = server.grpc_client()
    try:
        for i in range(count):
            a = np.full((1, 4), float(i), np.float32)
            b = np.ones((1, 4), np.float32)
            module, client = (httpclient, http) if i % 2 == 0 else (grpcclient, grpc_)
            inputs = []
            for input_name, data in (("INPUT0", a), ("INPUT1", b)):
                inp = module.InferInput(input_name, [1, 4], "FP32")
                inp.set_data_from_numpy(data)
                inputs.append(inp)
            result = client.infer("add_sub", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    finally:
        http.close()
        grpc_.close()


def check_summary(family, count, quantiles):
    assert family.type == "summary", family
    points = model_samples(family)
    assert [float(p.labels["quantile"]) for p in points] == quantiles, points
    for p in points:
        assert set(p.labels) == {"model", "version", "quantile"}, p
    values = [p.value for p in points]
    assert all(v >= 0 for v in values), values
    assert values == sorted(values), f"{family.name}: quantiles out of order: {values}"
    assert value(family, family.name + "_count") == count
    total = value(family, family.name + "_sum")
    assert 0 <= total
    # Every quantile is one of the observations, so it is at most their sum.
    assert max(values) <= total
    return total


def test_default_families(make_repo, start_server):
    server = start_server(make_repo(["add_sub"]))
    drive(server, 4)
    found = families(server)
    for name in LATENCY_COUNTERS:
        assert found[name].type == "counter", found[name]
        assert value(found[name]) >= 0
    assert value(found["nv_inference_request_duration_us"]) > 0
    assert not [n for n in found if n.endswith("_summary_us")], "summaries are off by default"
    assert found["nv_inference_request_success"].type == "counter"
    assert value(found["nv_inference_request_success"]) == 4
    pending = found["nv_inference_pending_request_count"]
    assert pending.type == "gauge" and value(pending) == 0
    load = found["nv_model_load_duration_secs"]
    assert load.type == "gauge"
    assert load.documentation == "Model load time in seconds"
    assert set(model_samples(load)[0].labels) == {"model", "version"}
    assert 0 < value(load) < 60


def test_summary_latencies_with_quantiles_and_no_counters(make_repo, start_server):
    quantiles = [0.5, 0.9, 0.99]
    server = start_server(
        make_repo(["add_sub"]),
        "--metrics-config", "summary_latencies=true",
        "--metrics-config", "counter_latencies=false",
        "--metrics-config", "summary_quantiles=0.5:0.05,0.9:0.01,0.99:0.001",
    )
    before = families(server)
    for name in SUMMARIES:
        # Before any request: count 0 and no quantile known yet (NaN, as prometheus-cpp).
        assert value(before[name], name + "_count") == 0
        assert all(np.isnan(p.value) for p in model_samples(before[name]))
    count = 20
    drive(server, count)
    found = families(server)
    totals = {name: check_summary(found[name], count, quantiles) for name in SUMMARIES}
    assert totals["nv_inference_request_summary_us"] > 0
    assert totals["nv_inference_compute_infer_summary_us"] <= totals["nv_inference_request_summary_us"]
    assert found["nv_inference_request_summary_us"].documentation == (
        "Summary of inference request duration in microseconds (includes cached requests)"
    )
    for name in LATENCY_COUNTERS:
        assert name not in found, f"{name} exported with counter_latencies=false"
    # Counts that are not latencies stay.
    assert value(found["nv_inference_request_success"]) == count
    assert value(found["nv_inference_count"]) == count


def test_cache_models_get_cache_summaries_and_no_request_summary(make_repo, start_server):
    config = add_sub_config(extra="response_cache { enable: true }\n")
    server = start_server(
        make_repo([], {"add_sub": config}),
        "--cache-config", "local,size=1048576",
        "--metrics-config", "summary_latencies=true",
    )
    drive(server, 2)
    drive(server, 2)  # the same inputs again: hits
    found = families(server)
    # Triton disables the request summary for cache-enabled models (DLIS-4762).
    assert "nv_inference_request_summary_us" not in found
    hits = found["nv_cache_hit_summary_per_model"]
    misses = found["nv_cache_miss_summary_per_model"]
    assert hits.type == misses.type == "summary"
    assert value(hits, "nv_cache_hit_summary_per_model_count") == 2
    assert value(misses, "nv_cache_miss_summary_per_model_count") == 2
    assert value(found["nv_cache_num_hits_per_model"]) == 2


def test_pending_counts_requests_waiting_in_the_queue(make_repo, start_server):
    # The batcher holds requests for up to 2 s hoping for a batch of 8: three requests
    # sent together wait in the queue, pending, and are no longer pending once they ran.
    config = add_sub_config(
        extra="dynamic_batching { preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 2000000 }\n"
    )
    server = start_server(make_repo([], {"add_sub": config}))
    threads = [threading.Thread(target=drive, args=(server, 1)) for _ in range(3)]
    for t in threads:
        t.start()
    pending = wait_for(
        lambda: value(families(server)["nv_inference_pending_request_count"]) == 3 or None,
        timeout=1.8,
        what="three pending requests",
    )
    assert pending
    for t in threads:
        t.join(10)
    found = families(server)
    assert value(found["nv_inference_pending_request_count"]) == 0
    assert value(found["nv_inference_request_success"]) == 3
    assert value(found["nv_inference_exec_count"]) == 1, "one batch of three"


def test_metrics_interval_governs_the_cpu_poll(make_repo, start_server):
    repo = make_repo(["add_sub"])
    # One poll a minute: within the test only the start-up poll exists, so utilization
    # (the share between the last two polls) stays 0 however busy the machine is.
    slow = start_server(repo, "--metrics-interval-ms", "60000")
    drive(slow, 20)
    for _ in range(3):
        found = families(slow)
        assert found["nv_cpu_utilization"].type == "gauge"
        assert found["nv_cpu_utilization"].samples[0].value == 0
        assert found["nv_cpu_memory_total_bytes"].samples[0].value > 0
    # Polled every 100 ms, it moves: the machine is never fully idle while a server,
    # this test and a build share it.
    fast = start_server(repo, "--metrics-interval-ms", "100")
    drive(fast, 20)
    utilization = wait_for(
        lambda: families(fast)["nv_cpu_utilization"].samples[0].value or None,
        timeout=10,
        what="a non-zero CPU utilization",
    )
    assert 0 < utilization <= 1


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--metrics-config", "summary_quantiles=abc"],
         "--metrics-config summary_quantiles=abc: 'abc' is not <quantile>:<error>"),
        (["--metrics-config", "summary_quantiles=0.5:0.05,2:0.1"],
         "--metrics-config summary_quantiles=0.5:0.05,2:0.1: '2:0.1': the quantile must be in [0, 1]"),
        (["--metrics-config", "summary_latencies=maybe"],
         "--metrics-config summary_latencies=maybe: expected true or false"),
        (["--metrics-config", "no_such_setting=1"],
         "--metrics-config no_such_setting=1: unknown setting 'no_such_setting'"),
        (["--metrics-config", "summary_latencies"],
         "--metrics-config option format is <setting>=<value>. Got summary_latencies"),
        (["--metrics-config", "add_sub,summary_latencies=true"],
         "--metrics-config option format is <setting>=<value>. Got add_sub,summary_latencies=true"),
        (["--metrics-interval-ms", "0"], "--metrics-interval-ms must be greater than 0."),
    ],
)
def test_bad_metrics_flags_stop_startup(make_repo, start_server, flags, message):
    repo = make_repo(["add_sub"])
    server = start_server(repo, raw_args=base_args(repo, flags), wait=False)
    code = server.wait_exit(15)
    assert code not in (None, 0), server.log()
    assert message in server.log(), server.log()
