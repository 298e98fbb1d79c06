"""Triton's scheduler test hooks, set in the server's environment:
TRITONSERVER_DELAY_SCHEDULER=N holds a batcher until N requests are queued (then never
again), as Triton's qa/L0_sequence_batcher and qa/L0_batcher use it to make batches
deterministic. The sequence test is L0_sequence_batcher's test_simple_sequence: two
sequences of four requests with N=8 run as four batches of two on one instance.

A bad value is ignored with a warning (Triton's atoi would read it as 0, or "-1" as a
hold that never ends).
"""

import queue

import numpy as np
import tritonclient.grpc as grpcclient

from conftest import add_sub_config

SEQ_MODEL = "sequence_accumulate"
HOLD_S = 0.5


def statistics(srv, model):
    with srv.http_client() as client:
        return client.get_inference_statistics(model)["model_stats"][0]


def batches(stats):
    return {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}


def fp32(name, value, shape=(1, 1)):
    inp = grpcclient.InferInput(name, list(shape), "FP32")
    inp.set_data_from_numpy(np.full(shape, value, np.float32))
    return inp


def test_delay_scheduler_holds_a_sequence_model_until_n_requests_are_queued(make_repo, start_server):
    srv = start_server(make_repo([SEQ_MODEL]), env={"TRITONSERVER_DELAY_SCHEDULER": "8"})
    results = queue.Queue()
    client = srv.grpc_client()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        # (sequence, value, start, end) interleaved; the running sums end at 10 and 27.
        requests = []
        for step, (a, b) in enumerate(((1, 0), (2, 9), (3, 5), (4, 13))):
            flags = {"sequence_start": step == 0, "sequence_end": step == 3}
            requests.append((987, a, flags))
            requests.append((988, b, flags))
        for seq, value, flags in requests[:7]:
            client.async_stream_infer(SEQ_MODEL, [fp32("INPUT", value)], sequence_id=seq, **flags)
        # No timeout ends the hold: with 7 of 8 queued nothing runs.
        try:
            early = results.get(timeout=HOLD_S)
        except queue.Empty:
            early = None
        assert early is None, f"a request ran before 8 were queued: {early}"
        assert statistics(srv, SEQ_MODEL)["execution_count"] == 0
        seq, value, flags = requests[7]
        client.async_stream_infer(SEQ_MODEL, [fp32("INPUT", value)], sequence_id=seq, **flags)
        sums = {987: [], 988: []}
        for _ in range(8):
            result, error = results.get(timeout=10)
            assert error is None, error
            sums[int(result.as_numpy("CORRID_OUT")[0, 0])].append(float(result.as_numpy("OUTPUT")[0, 0]))
    finally:
        client.stop_stream()
    assert sums == {987: [1.0, 3.0, 6.0, 10.0], 988: [0.0, 9.0, 14.0, 27.0]}
    stats = statistics(srv, SEQ_MODEL)
    assert batches(stats) == {2: 4}, "each step of the two sequences ran together"
    assert stats["execution_count"] == 4


def test_delay_scheduler_holds_the_dynamic_batcher_once(make_repo, start_server):
    config = add_sub_config(extra="dynamic_batching { }\n")
    srv = start_server(make_repo([], {"add_sub": config}), env={"TRITONSERVER_DELAY_SCHEDULER": "3"})
    client = srv.grpc_client()
    done = queue.Queue()

    def send(value):
        inputs = [fp32("INPUT0", value, (1, 4)), fp32("INPUT1", 1.0, (1, 4))]
        client.async_infer("add_sub", inputs, lambda result, error: done.put((result, error)))

    send(1.0)
    send(2.0)
    try:
        early = done.get(timeout=HOLD_S)
    except queue.Empty:
        early = None
    assert early is None, "ran before 3 requests were queued"
    send(3.0)
    for _ in range(3):
        result, error = done.get(timeout=10)
        assert error is None, error
    assert batches(statistics(srv, "add_sub")) == {3: 1}
    # The hold is over for good: a lone request runs at once.
    send(4.0)
    result, error = done.get(timeout=10)
    assert error is None, error
    assert batches(statistics(srv, "add_sub")) == {3: 1, 1: 1}


def test_a_bad_delay_value_is_ignored_with_a_warning(make_repo, start_server):
    env = {"TRITONSERVER_DELAY_SCHEDULER": "eight"}
    srv = start_server(make_repo([SEQ_MODEL]), env=env)
    client = srv.grpc_client()
    inp = fp32("INPUT", 5.0)
    result = client.infer(SEQ_MODEL, [inp], sequence_id=1, sequence_start=True, sequence_end=True)
    assert float(result.as_numpy("OUTPUT")[0, 0]) == 5.0
    assert "ignoring TRITONSERVER_DELAY_SCHEDULER" in srv.log()

