"""Statistics extension (HTTP + gRPC) and the Prometheus metrics port, on a
server of their own so the counts are exactly this module's traffic."""

import re
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

# add_sub has no dynamic batching: every request is one execution of its own
# batch size.
BATCHES = [1, 1, 2, 8, 1]
N = len(BATCHES)


@pytest.fixture
def counted(make_repo, start_server, add_sub_io):
    """A fresh server on add_sub that has served exactly BATCHES (HTTP and gRPC
    alternately) plus one rejected request."""
    server = start_server(make_repo(["add_sub"]))
    http = server.http_client()
    grpc_ = server.grpc_client()
    for i, batch in enumerate(BATCHES):
        a = np.full((batch, 4), float(i), np.float32)
        b = np.ones((batch, 4), np.float32)
        if i % 2 == 0:
            http.infer("add_sub", add_sub_io(httpclient, a, b))
        else:
            grpc_.infer("add_sub", add_sub_io(grpcclient, a, b))
    # Rejected before it reaches the scheduler (batch 9 > max_batch_size 8):
    # Triton counts such a request neither as success nor as fail (measured on
    # 2.51: fail stays 0).
    too_big = np.ones((9, 4), np.float32)
    with pytest.raises(Exception):
        http.infer("add_sub", add_sub_io(httpclient, too_big, too_big))
    yield server, http, grpc_
    http.close()
    grpc_.close()


DURATIONS = ["success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss"]


def test_statistics_http(counted):
    server, http, _ = counted
    before_ms = int(time.time() * 1000)
    stats = http.get_inference_statistics("add_sub")
    assert list(stats) == ["model_stats"]
    assert len(stats["model_stats"]) == 1
    s = stats["model_stats"][0]
    # JSON shape of reference section 1.5.
    assert set(s) == {
        "name",
        "version",
        "last_inference",
        "inference_count",
        "execution_count",
        "inference_stats",
        "response_stats",
        "batch_stats",
        "memory_usage",
    }
    assert (s["name"], s["version"]) == ("add_sub", "1")
    assert s["inference_count"] == sum(BATCHES)
    assert s["execution_count"] == N
    # last_inference is milliseconds since the epoch.
    assert before_ms - 60_000 < s["last_inference"] <= before_ms + 1000
    assert set(s["inference_stats"]) == set(DURATIONS)
    for key in DURATIONS:
        assert set(s["inference_stats"][key]) == {"count", "ns"}
    inf = s["inference_stats"]
    assert inf["success"]["count"] == N
    assert inf["success"]["ns"] > 0
    assert inf["fail"] == {"count": 0, "ns": 0}
    for key in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert inf[key]["count"] == N
    assert inf["compute_infer"]["ns"] > 0
    assert inf["cache_hit"] == {"count": 0, "ns": 0}
    assert inf["cache_miss"] == {"count": 0, "ns": 0}
    assert s["response_stats"] == {}
    assert s["memory_usage"] == []
    by_size = {b["batch_size"]: b for b in s["batch_stats"]}
    assert sorted(by_size) == [1, 2, 8]
    for size, entry in by_size.items():
        assert set(entry) == {"batch_size", "compute_input", "compute_infer", "compute_output"}
        for key in ("compute_input", "compute_infer", "compute_output"):
            assert entry[key]["count"] == BATCHES.count(size)

    # Same document for the version path and inside the all-models listing.
    assert http.get_inference_statistics("add_sub", "1")["model_stats"][0]["inference_count"] == sum(BATCHES)
    everything = http.get_inference_statistics()
    assert [m["name"] for m in everything["model_stats"]] == ["add_sub"]
    resp = server.request("GET", "/v2/models/add_sub/versions/3/stats")
    assert (resp.status, resp.json()) == (
        400,
        {"error": "requested model version is not available for model 'add_sub'"},
    )


def test_statistics_grpc(counted):
    _, _, grpc_ = counted
    stats = grpc_.get_inference_statistics("add_sub")
    assert len(stats.model_stats) == 1
    s = stats.model_stats[0]
    assert (s.name, s.version) == ("add_sub", "1")
    assert s.inference_count == sum(BATCHES)
    assert s.execution_count == N
    assert s.last_inference > 0
    assert s.inference_stats.success.count == N
    assert s.inference_stats.fail.count == 0
    assert s.inference_stats.compute_infer.count == N
    assert {b.batch_size: b.compute_infer.count for b in s.batch_stats} == {1: 3, 2: 1, 8: 1}
    assert len(grpc_.get_inference_statistics().model_stats) == 1


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """Prometheus text -> {(name, frozenset(labels.items())): float} and TYPE lines."""
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            types[name] = kind
            continue
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        labels = frozenset(_LABEL.findall(m.group(2) or ""))
        samples[(m.group(1), labels)] = float(m.group(3))
    return samples, types


def test_metrics(counted):
    server, _, _ = counted
    text = server.metrics()
    samples, types = parse_metrics(text)
    model = {("model", "add_sub"), ("version", "1")}

    def value(name, **extra):
        key = (name, frozenset(model | set(extra.items())))
        assert key in samples, f"{name}{model | set(extra.items())} missing from metrics:\n{text}"
        return samples[key]

    assert value("nv_inference_request_success") == N
    assert value("nv_inference_count") == sum(BATCHES)
    assert value("nv_inference_exec_count") == N
    assert value("nv_inference_pending_request_count") == 0
    for reason in ("BACKEND", "OTHER", "CANCELED", "REJECTED"):
        assert value("nv_inference_request_failure", reason=reason) == 0
    for name in (
        "nv_inference_request_duration_us",
        "nv_inference_compute_infer_duration_us",
    ):
        assert value(name) > 0
    for name in ("nv_inference_queue_duration_us", "nv_inference_compute_input_duration_us", "nv_inference_compute_output_duration_us"):
        assert value(name) >= 0
    for name in (
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
    ):
        assert types.get(name) == "counter", name
    assert types.get("nv_inference_pending_request_count") == "gauge"
    # The exact line a dashboard greps for (labels in Triton's order).
    assert f'nv_inference_request_success{{model="add_sub",version="1"}} {N}' in text.splitlines()


def test_server_wide_cpu_and_memory_gauges(server):
    # Triton's server-wide gauges: CPU utilization between two scrapes and RAM.
    def gauges():
        values = {}
        for line in server.metrics().splitlines():
            if line.startswith("nv_cpu_"):
                name, value = line.split()
                values[name] = float(value)
        return values

    gauges()
    g = gauges()
    assert 0.0 <= g["nv_cpu_utilization"] <= 1.0
    assert g["nv_cpu_memory_total_bytes"] > 0
    assert 0 < g["nv_cpu_memory_used_bytes"] <= g["nv_cpu_memory_total_bytes"]
