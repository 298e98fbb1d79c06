"""Dynamic batcher (`dynamic_batching`): requests that wait together execute together,
each caller gets exactly its own slice back, and the queue policies answer with
Triton's errors (UNAVAILABLE "Request timeout expired" / "Exceeds maximum queue size").

Timings here are behaviour (a request may not run before its batch is complete),
never performance targets, and every bound is loose.
"""

import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import add_sub_config as base_config
from conftest import run_in_threads


def add_sub_config(batching, max_batch_size=8, instances=1):
    return base_config(
        max_batch_size=max_batch_size, count=instances, extra=f"dynamic_batching {{ {batching} }}\n"
    )


@pytest.fixture
def batching_server(make_repo, start_server):
    def start(batching, **kwargs):
        repo = make_repo([], {"add_sub": add_sub_config(batching, **kwargs)})
        return start_server(repo)

    return start


def infer_one(client_module, client, value, batch=1, **kwargs):
    a = np.full((batch, 4), value, dtype=np.float32)
    b = np.arange(batch * 4, dtype=np.float32).reshape(batch, 4)
    inputs = []
    for name, data in (("INPUT0", a), ("INPUT1", b)):
        inp = client_module.InferInput(name, list(data.shape), "FP32")
        inp.set_data_from_numpy(data)
        inputs.append(inp)
    result = client.infer("add_sub", inputs, **kwargs)
    return a, b, result


def stats_of(server):
    with server.http_client() as client:
        return client.get_inference_statistics("add_sub")["model_stats"][0]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_concurrent_requests_are_batched_and_never_mixed(batching_server, protocol):
    server = batching_server("max_queue_delay_microseconds: 20000")
    module = httpclient if protocol == "http" else grpcclient
    failures = []
    per_thread = 6

    def worker(index):
        client = server.http_client() if protocol == "http" else server.grpc_client()
        try:
            for k in range(per_thread):
                value = float(index * 100 + k)
                batch = 1 + (index + k) % 2
                a, b, result = infer_one(module, client, value, batch=batch)
                if not (
                    np.array_equal(result.as_numpy("OUTPUT0"), a + b)
                    and np.array_equal(result.as_numpy("OUTPUT1"), a - b)
                ):
                    failures.append((index, k))
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(repr(e))
        finally:
            client.close()

    run_in_threads(worker, 8)
    assert failures == []
    stats = stats_of(server)
    expected_elements = sum(1 + (i + k) % 2 for i in range(8) for k in range(per_thread))
    assert stats["inference_count"] == expected_elements
    assert stats["inference_stats"]["success"]["count"] == 8 * per_thread
    assert stats["execution_count"] < 8 * per_thread
    sizes = {b["batch_size"] for b in stats["batch_stats"]}
    assert max(sizes) > 2, sizes
    assert sum(b["compute_infer"]["count"] for b in stats["batch_stats"]) == stats["execution_count"]
    # The metrics port shows the same batching.
    metrics = server.metrics()
    assert f'nv_inference_exec_count{{model="add_sub",version="1"}} {stats["execution_count"]}' in metrics


def test_preferred_batch_size_executes_without_waiting_for_the_delay(batching_server):
    server = batching_server("preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 3000000")
    start = time.monotonic()
    results = []

    def worker(value):
        with server.http_client() as client:
            results.append(infer_one(httpclient, client, value))

    threads = [threading.Thread(target=worker, args=(float(i),)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    assert len(results) == 4
    # Four requests fill the preferred size: no waiting for the 3 s delay.
    assert elapsed < 2.5, elapsed
    assert [b["batch_size"] for b in stats_of(server)["batch_stats"]] == [4]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_request_that_fills_a_smaller_preferred_size_runs_at_once(batching_server, protocol):
    # Triton's L0_batcher: preferred sizes [2, 6] and a 10 s delay. A batch-2 request is
    # a preferred batch by itself; Triton answers it in milliseconds.
    server = batching_server("preferred_batch_size: [ 2, 6 ] max_queue_delay_microseconds: 10000000")
    module = httpclient if protocol == "http" else grpcclient
    client = server.http_client() if protocol == "http" else server.grpc_client()
    start = time.monotonic()
    a, b, result = infer_one(module, client, 1.0, batch=2)
    elapsed = time.monotonic() - start
    client.close()
    assert np.array_equal(result.as_numpy("OUTPUT0"), a + b)
    assert elapsed < 2.0, elapsed
    assert [b["batch_size"] for b in stats_of(server)["batch_stats"]] == [2]


def test_queue_delay_holds_a_lone_request(batching_server):
    server = batching_server("max_queue_delay_microseconds: 300000")
    with server.http_client() as client:
        start = time.monotonic()
        a, b, result = infer_one(httpclient, client, 1.0)
        elapsed = time.monotonic() - start
    assert np.array_equal(result.as_numpy("OUTPUT0"), a + b)
    # A single request waits for company for the configured 300 ms.
    assert elapsed >= 0.25, elapsed


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_queue_timeout_rejects(batching_server, error_of, protocol):
    server = batching_server(
        "max_queue_delay_microseconds: 2000000 "
        "default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 100000 }"
    )
    module = httpclient if protocol == "http" else grpcclient
    client = server.http_client() if protocol == "http" else server.grpc_client()
    try:
        start = time.monotonic()
        e = error_of(infer_one, module, client, 1.0)
        assert time.monotonic() - start < 1.5
        assert e.message() == "Request timeout expired"
        assert e.status() == ("503" if protocol == "http" else "StatusCode.UNAVAILABLE")
    finally:
        client.close()
    assert stats_of(server)["inference_stats"]["fail"]["count"] == 1
    assert 'nv_inference_request_failure{model="add_sub",reason="REJECTED",version="1"} 1' in server.metrics()


def test_request_timeout_override_only_lowers(batching_server, error_of):
    server = batching_server(
        "max_queue_delay_microseconds: 500000 "
        "default_queue_policy { allow_timeout_override: true }"
    )
    with server.http_client() as client:
        e = error_of(infer_one, httpclient, client, 1.0, timeout=50000)
        assert e.message() == "Request timeout expired"
        # Without a timeout the request waits out the delay and succeeds.
        a, b, result = infer_one(httpclient, client, 2.0)
        assert np.array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_delay_action_still_executes(batching_server):
    server = batching_server(
        "max_queue_delay_microseconds: 200000 "
        "default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 1000 }"
    )
    with server.grpc_client() as client:
        a, b, result = infer_one(grpcclient, client, 3.0)
    assert np.array_equal(result.as_numpy("OUTPUT0"), a + b)


def test_full_queue_rejects_at_once(batching_server, error_of):
    server = batching_server(
        "preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 1500000 "
        "default_queue_policy { max_queue_size: 1 }"
    )
    first = {}

    def waiter():
        with server.http_client() as client:
            first["result"] = infer_one(httpclient, client, 1.0)

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.3)  # the first request is now waiting in the queue
    with server.grpc_client() as client:
        start = time.monotonic()
        e = error_of(infer_one, grpcclient, client, 2.0)
        assert time.monotonic() - start < 1.0
    assert e.message() == "Exceeds maximum queue size"
    assert e.status() == "StatusCode.UNAVAILABLE"
    t.join()
    a, b, result = first["result"]
    assert np.array_equal(result.as_numpy("OUTPUT0"), a + b)


def test_priorities_are_accepted(batching_server):
    server = batching_server("priority_levels: 3 default_priority_level: 2")
    with server.grpc_client() as client:
        for priority in (0, 1, 3, 99):
            a, b, result = infer_one(grpcclient, client, 1.0, priority=priority)
            assert np.array_equal(result.as_numpy("OUTPUT0"), a + b)


@pytest.mark.parametrize(
    "batching,message",
    [
        ("preferred_batch_size: [ 16 ]", "dynamic batching preferred size must be <= max batch size for add_sub"),
        ("preferred_batch_size: [ 0 ]", "dynamic batching preferred size must be positive for add_sub"),
        ("priority_levels: 2 default_priority_level: 3", "default priority level must be in range [1, 2] for add_sub"),
        (
            "preserve_ordering: true priority_levels: 2 default_priority_level: 1",
            "Only one priority level is allowed when 'preserve_ordering' is true for add_sub",
        ),
        (
            "preserve_ordering: true default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 10 }",
            "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for add_sub",
        ),
    ],
)
def test_invalid_batching_config_fails_the_load(make_repo, start_server, batching, message):
    repo = make_repo([], {"add_sub": add_sub_config(batching)})
    server = start_server(repo, "--model-control-mode=explicit")
    with server.http_client() as client:
        with pytest.raises(Exception) as err:
            client.load_model("add_sub")
        assert message in str(err.value)


def test_preserve_ordering_serves_every_request(batching_server):
    server = batching_server("preserve_ordering: true max_queue_delay_microseconds: 1000", instances=2)
    results = []

    def worker(index):
        with server.grpc_client() as client:
            for k in range(5):
                a, b, result = infer_one(grpcclient, client, float(index * 10 + k))
                results.append(np.array_equal(result.as_numpy("OUTPUT0"), a + b))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 20
