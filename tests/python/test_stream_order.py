"""gRPC `ModelStreamInfer` answers in the order the requests arrived, as Triton does
for non-decoupled models, whatever the scheduler and however fast each answer is:
requests that fail at once, cache hits and two-instance dynamic batching all
overtake earlier requests inside the server, and must not overtake them on the
stream.
"""

import queue

import numpy as np
import tritonclient.grpc as grpcclient

from conftest import add_sub_config, add_sub_inputs

F32 = np.float32
DYNAMIC = add_sub_config(
    name="add_sub_dynamic", count=2, extra="dynamic_batching { max_queue_delay_microseconds: 2000 }\n"
)
CACHED = add_sub_config(name="add_sub_cached", extra="response_cache { enable: true }\n")


def stream_all(client, requests):
    """Sends every (model, inputs, kwargs) on one stream; returns the answers
    as (request id, result, error) in the order the stream delivered them."""
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for i, (model, inputs, kwargs) in enumerate(requests):
            client.async_stream_infer(model, inputs, request_id=str(i), **kwargs)
        delivered = []
        for _ in requests:
            result, error = answers.get(timeout=60)
            rid = result.get_response().id if error is None else error.message().split("]")[0][13:]
            delivered.append((rid, result, error))
    finally:
        client.stop_stream()
    return delivered


def pair(i):
    a = np.full((1, 4), i, F32)
    return a, np.ones((1, 4), F32)


def test_mixed_schedulers_cache_hits_and_errors_keep_arrival_order(make_repo, start_server):
    repo = make_repo(["add_sub", "ensemble_add_sub", "sequence_accumulate"], {
        "add_sub_dynamic": DYNAMIC,
        "add_sub_cached": CACHED,
    })
    srv = start_server(repo, "--cache-config", "local,size=1048576")
    client = srv.grpc_client()
    requests, expected = [], []
    for i in range(1200):
        kind = i % 6
        if kind == 0:
            a, b = pair(i)
            requests.append(("add_sub", add_sub_inputs(grpcclient, a, b), {}))
            expected.append(a + b)
        elif kind == 1:
            a, b = pair(i)
            requests.append(("add_sub_dynamic", add_sub_inputs(grpcclient, a, b), {}))
            expected.append(a + b)
        elif kind == 2:
            # Only a few distinct inputs, so nearly all of these are cache hits.
            a, b = pair(i % 5)
            requests.append(("add_sub_cached", add_sub_inputs(grpcclient, a, b), {}))
            expected.append(a + b)
        elif kind == 3:
            a, b = pair(i)
            requests.append(("ensemble_add_sub", add_sub_inputs(grpcclient, a, b), {}))
            expected.append(2 * a)
        elif kind == 4:
            # Batch 9 is over add_sub's max_batch_size: refused before it is queued.
            a, b = np.zeros((9, 4), F32), np.zeros((9, 4), F32)
            requests.append(("add_sub", add_sub_inputs(grpcclient, a, b), {}))
            expected.append(None)
        else:
            value = np.array([[float(i)]], F32)
            inputs = [grpcclient.InferInput("INPUT", [1, 1], "FP32")]
            inputs[0].set_data_from_numpy(value)
            step = (i // 6) % 4
            kwargs = {"sequence_id": 7, "sequence_start": step == 0, "sequence_end": step == 3}
            requests.append(("sequence_accumulate", inputs, kwargs))
            expected.append("sequence")

    delivered = stream_all(client, requests)

    assert [rid for rid, _, _ in delivered] == [str(i) for i in range(len(requests))]
    running_sum = 0.0
    for i, (_, result, error) in enumerate(delivered):
        want = expected[i]
        if want is None:
            assert error is not None and "batch-size must be <= 8" in error.message()
            continue
        assert error is None, error
        output = result.as_numpy("OUTPUT0" if not isinstance(want, str) else "OUTPUT")
        if isinstance(want, str):
            step = (i // 6) % 4
            running_sum = float(i) if step == 0 else running_sum + float(i)
            assert output.item() == running_sum
        else:
            np.testing.assert_array_equal(output, want)
