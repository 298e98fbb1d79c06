"""Sequence batcher (reference section 5) with the example model
`sequence_accumulate`: a running sum kept in implicit state (ACC_IN/ACC_OUT)
and the START/END/READY/CORRID control tensors echoed back as outputs, driven
by tritonclient's `sequence_id` / `sequence_start` / `sequence_end` over HTTP,
gRPC and gRPC streaming.

Deliberate differences from Triton 2.51 (marked again where tested):
- a request on a sequence that the idle timeout released says so, instead of
  Triton's "must specify the START flag" text for a never-started sequence;
- active sequences, backlog and slot use are exported as metrics
  (`nv_sequence_*`).
"""

import os
import queue
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import EXAMPLE_MODELS, wait_for

MODEL = "sequence_accumulate"
BASE_CONFIG = open(os.path.join(EXAMPLE_MODELS, MODEL, "config.pbtxt")).read()


def config(max_batch=4, count=1, idle_us=5000000, strategy="", extra=""):
    text = BASE_CONFIG.replace("max_batch_size: 4", f"max_batch_size: {max_batch}")
    text = text.replace("kind: KIND_CPU count: 1", f"kind: KIND_CPU count: {count}")
    text = text.replace("max_sequence_idle_microseconds: 5000000", f"max_sequence_idle_microseconds: {idle_us}\n  {strategy}")
    return text + extra


def send(client, seq, value, start=False, end=False):
    mod = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    inp = mod.InferInput("INPUT", [1, 1], "FP32")
    inp.set_data_from_numpy(np.array([[value]], np.float32))
    r = client.infer(MODEL, [inp], sequence_id=seq, sequence_start=start, sequence_end=end)
    return outputs_of(r)


def outputs_of(r):
    return {
        "sum": float(r.as_numpy("OUTPUT")[0, 0]),
        "start": float(r.as_numpy("START_OUT")[0, 0]),
        "end": int(r.as_numpy("END_OUT")[0, 0]),
        "ready": bool(r.as_numpy("READY_OUT")[0, 0]),
        "corrid": int(r.as_numpy("CORRID_OUT")[0, 0]),
    }


def stats(srv):
    return srv.http_client().get_inference_statistics(MODEL)["model_stats"][0]


def gauge(srv, name):
    for line in srv.metrics().splitlines():
        if line.startswith(f'{name}{{model="{MODEL}"'):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture
def seq_server(make_repo, start_server):
    def start(text=None, *args):
        return start_server(make_repo([MODEL], {MODEL: text} if text else None), *args)

    return start


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_state_and_controls_follow_the_sequence(server, proto):
    client = server.http_client() if proto == "http" else server.grpc_client()
    seq = 1001 if proto == "http" else 1002
    first = send(client, seq, 1.0, start=True)
    assert first == {"sum": 1.0, "start": 1.0, "end": 0, "ready": True, "corrid": seq}
    middle = send(client, seq, 2.0)
    assert middle == {"sum": 3.0, "start": 0.0, "end": 0, "ready": True, "corrid": seq}
    last = send(client, seq, 4.0, end=True)
    assert last == {"sum": 7.0, "start": 0.0, "end": 1, "ready": True, "corrid": seq}
    # The same ID again needs START, and START resets the state.
    assert send(client, seq, 5.0, start=True, end=True)["sum"] == 5.0


def test_interleaved_sequences_keep_separate_state(server):
    http, grpc = server.http_client(), server.grpc_client()
    send(http, 2001, 1.0, start=True)
    send(grpc, 2002, 100.0, start=True)
    assert send(grpc, 2001, 1.0)["sum"] == 2.0
    assert send(http, 2002, 100.0)["sum"] == 200.0
    assert send(http, 2001, 1.0, end=True)["sum"] == 3.0
    assert send(grpc, 2002, 100.0, end=True)["sum"] == 300.0


def test_streaming_sequence(server):
    results = queue.Queue()
    client = server.grpc_client()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for i, (start, end) in enumerate([(True, False), (False, False), (False, True)]):
            inp = grpcclient.InferInput("INPUT", [1, 1], "FP32")
            inp.set_data_from_numpy(np.array([[i + 1.0]], np.float32))
            client.async_stream_infer(MODEL, [inp], sequence_id=3001, sequence_start=start, sequence_end=end)
        sums = []
        for _ in range(3):
            result, error = results.get(timeout=10)
            assert error is None, error
            sums.append(outputs_of(result)["sum"])
        assert sums == [1.0, 3.0, 6.0]
    finally:
        client.stop_stream()


def test_string_ids_must_fit_the_corrid_control(server, error_of):
    # The model's CORRID control is TYPE_UINT64: Triton refuses a string ID for it
    # (core ValidateCorrelationId, L0_sequence_corrid_batcher); numbers are taken.
    client = server.grpc_client()
    e = error_of(send, client, "user-42", 2.0, start=True)
    assert e.message().endswith(
        f"sequence batching control 'CORRID' data-type is 'BYTES', but model '{MODEL}' expects 'UINT64'"
    ), e.message()
    assert send(client, 4242, 2.0, start=True)["sum"] == 2.0
    assert send(client, 4242, 3.0, end=True)["sum"] == 5.0


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_request_errors(server, error_of, proto):
    client = server.http_client() if proto == "http" else server.grpc_client()
    e = error_of(send, client, 0, 1.0, start=True)
    assert e.message() == (
        f"inference request to model '{MODEL}' must specify a non-zero or non-empty correlation ID"
    )
    e = error_of(send, client, 4001, 1.0)
    assert e.message() == (
        f"inference request for sequence 4001 to model '{MODEL}' must specify the START flag on the first request of the sequence"
    )
    mod = httpclient if proto == "http" else grpcclient
    inp = mod.InferInput("INPUT", [2, 1], "FP32")
    inp.set_data_from_numpy(np.ones([2, 1], np.float32))
    e = error_of(client.infer, MODEL, [inp], sequence_id=4002, sequence_start=True)
    assert e.message() == (
        f"inference request to model '{MODEL}' must specify batch-size 1 due to requirements of sequence batcher"
    )
    # The server keeps serving the model.
    assert send(client, 4003, 1.0, start=True, end=True)["sum"] == 1.0


def test_idle_sequences_are_released_with_a_clear_error(seq_server, error_of):
    srv = seq_server(config(idle_us=200000))
    client = srv.http_client()
    send(client, 5001, 1.0, start=True)
    assert gauge(srv, "nv_sequence_active") == 1
    wait_for(lambda: gauge(srv, "nv_sequence_active") == 0, timeout=5, what="the idle release")
    e = error_of(send, client, 5001, 1.0)
    # Triton's words (L0_dyna_sequence_batcher matches their start), then the reason.
    assert e.message() == (
        f"inference request for sequence 5001 to model '{MODEL}' must specify the START flag "
        "on the first request of the sequence; it was released after 200000 µs without a "
        "request (max_sequence_idle_microseconds)"
    )
    assert send(client, 5001, 4.0, start=True)["sum"] == 4.0


def test_backlog_waits_for_a_free_slot(seq_server):
    srv = seq_server(config(max_batch=1))
    client = srv.grpc_client()
    send(client, 6001, 1.0, start=True)
    done = threading.Event()
    result = {}

    def backlogged():
        with srv.grpc_client() as c:
            result["second"] = send(c, 6002, 10.0, start=True)
        done.set()

    threading.Thread(target=backlogged, daemon=True).start()
    wait_for(lambda: gauge(srv, "nv_sequence_backlog") == 1, what="a backlogged sequence")
    assert not done.wait(0.3), "the second sequence must wait for the slot"
    assert send(client, 6001, 1.0, end=True)["sum"] == 2.0
    assert done.wait(10)
    assert result["second"]["sum"] == 10.0
    assert gauge(srv, "nv_sequence_backlog") == 0
    assert gauge(srv, "nv_sequence_slots_total") == 1


def test_direct_pads_idle_slots_below_the_active_one(seq_server):
    srv = seq_server(config(max_batch=2))
    client = srv.http_client()
    send(client, 7001, 1.0, start=True)  # slot 0, batch of 1
    send(client, 7002, 1.0, start=True)  # slot 1: padding for slot 0, batch of 2
    send(client, 7002, 1.0)  # again a batch of 2
    batches = {b["batch_size"]: b["compute_infer"]["count"] for b in stats(srv)["batch_stats"]}
    assert batches == {1: 1, 2: 2}
    # Padding requests are executed but are not requests: 3 successes and, as in Triton
    # (L0_sequence_batcher checks it), 3 inferences over 3 executions.
    s = stats(srv)
    assert s["inference_stats"]["success"]["count"] == 3
    assert (s["inference_count"], s["execution_count"]) == (3, 3)


def test_sequences_spread_over_instances(seq_server):
    srv = seq_server(config(max_batch=1, count=2))
    client = srv.grpc_client()
    send(client, 8001, 1.0, start=True)
    send(client, 8002, 2.0, start=True)
    assert gauge(srv, "nv_sequence_slots_used") == 2
    assert gauge(srv, "nv_sequence_backlog") == 0
    assert send(client, 8001, 1.0, end=True)["sum"] == 2.0
    assert send(client, 8002, 2.0, end=True)["sum"] == 4.0


def test_oldest_batches_ready_sequences(seq_server):
    strategy = "oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 500000 }"
    srv = seq_server(config(max_batch=2, strategy=strategy))
    results = {}

    def run(seq, start_value):
        with srv.grpc_client() as c:
            results[seq] = [send(c, seq, start_value, start=True)["sum"], send(c, seq, 1.0, end=True)["sum"]]

    threads = [threading.Thread(target=run, args=(s, v)) for s, v in ((9001, 1.0), (9002, 100.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert results == {9001: [1.0, 2.0], 9002: [100.0, 101.0]}
    batches = {b["batch_size"]: b["compute_infer"]["count"] for b in stats(srv)["batch_stats"]}
    # Two requests from different sequences ran together; no padding with `oldest`.
    assert batches.get(2, 0) >= 1, batches


@pytest.mark.parametrize(
    "control, message",
    [
        ('{ name: "" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] }',
         "sequence batching control tensor must have a name for sequence_accumulate"),
        ('{ name: "X" control [ { kind: CONTROL_SEQUENCE_START } ] }',
         "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for CONTROL_SEQUENCE_START for sequence_accumulate"),
        ('{ name: "X" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] }',
         "unexpected data type for control CONTROL_SEQUENCE_CORRID for sequence_accumulate. Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"),
        ('{ name: "X" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }',
         "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for sequence_accumulate"),
    ],
)
def test_control_validation(seq_server, control, message):
    text = BASE_CONFIG.replace("control_input [", f"control_input [\n    {control},")
    srv = seq_server(text, "--exit-on-error=false")
    index = srv.http_client().get_model_repository_index()
    assert index[0]["state"] == "UNAVAILABLE"
    assert message in index[0]["reason"], index[0]["reason"]


def test_response_cache_is_refused_for_sequence_models(seq_server):
    srv = seq_server(config(extra="response_cache { enable: true }\n"), "--exit-on-error=false",
                     "--cache-config", "local,size=65536")
    reason = srv.http_client().get_model_repository_index()[0]["reason"]
    assert (
        f"Response Cache does not currently support model {MODEL} with sequence batching scheduler. "
        "Please disable the response cache."
    ) in reason


def test_metadata_hides_controls_and_state(server):
    meta = server.http_client().get_model_metadata(MODEL)
    assert [i["name"] for i in meta["inputs"]] == ["INPUT"]
    assert "ACC_OUT" not in [o["name"] for o in meta["outputs"]]


def test_backlogged_sequence_expires_with_its_request_timeout(seq_server, error_of):
    srv = seq_server(config(max_batch=1))
    client = srv.http_client()
    send(client, 6101, 1.0, start=True)
    inp = httpclient.InferInput("INPUT", [1, 1], "FP32")
    inp.set_data_from_numpy(np.array([[1.0]], np.float32))
    started = time.monotonic()
    e = error_of(client.infer, MODEL, [inp], sequence_id=6102, sequence_start=True, timeout=100000)
    assert e.message() == "timeout of the corresponding sequence has been expired"
    assert time.monotonic() - started < 5
    assert gauge(srv, "nv_sequence_backlog") == 0
    # The sequence holding the slot is unaffected.
    assert send(client, 6101, 1.0, end=True)["sum"] == 2.0


def test_many_sequences_through_few_slots_each_get_their_own_sums(seq_server):
    # 2 slots, 8 concurrent sequences of 12 steps: most wait in the backlog at first.
    srv = seq_server(config(max_batch=2))
    errors, sums = [], {}

    def run(seq):
        try:
            with srv.grpc_client() as c:
                got = [send(c, seq, float(seq), start=True)["sum"]]
                for step in range(1, 12):
                    got.append(send(c, seq, float(step), end=step == 11)["sum"])
                sums[seq] = got
        except Exception as e:  # reported below, with the sequence
            errors.append((seq, e))

    threads = [threading.Thread(target=run, args=(s,)) for s in range(11, 19)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    for seq, got in sums.items():
        expected = np.cumsum([float(seq)] + [float(s) for s in range(1, 12)]).tolist()
        assert got == expected, seq
    assert len(sums) == 8


def test_initial_state_from_a_data_file(make_repo, start_server):
    text = BASE_CONFIG.replace(
        'dims: [ 1 ] } ]\n}',
        'dims: [ 1 ]\n    initial_state: [ { name: "hundred" data_type: TYPE_FP32 dims: [ 1 ] data_file: "hundred.bin" } ] } ]\n}',
    )
    assert "hundred.bin" in text
    # The model zeroes its state itself when START is 1; with START always 0 the
    # server's initial state is what the first request sees.
    text = text.replace("fp32_false_true: [ 0, 1 ]", "fp32_false_true: [ 0, 0 ]")
    repo = make_repo([MODEL], {MODEL: text})
    os.makedirs(os.path.join(repo, MODEL, "initial_state"))
    with open(os.path.join(repo, MODEL, "initial_state", "hundred.bin"), "wb") as f:
        f.write(np.array([100.0], np.float32).tobytes())
    srv = start_server(repo)
    client = srv.http_client()
    assert send(client, 12001, 1.0, start=True)["sum"] == 101.0
    assert send(client, 12001, 1.0)["sum"] == 102.0
    # START resets to the initial state, not to zero.
    assert send(client, 12001, 5.0, start=True, end=True)["sum"] == 105.0


@pytest.mark.parametrize(
    "state, message",
    [
        ('initial_state: [ { name: "a" data_type: TYPE_FP32 dims: [ 1 ] zero_data: true }, '
         '{ name: "b" data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } ]',
         "initial_state field for state input 'ACC_IN' must contain exactly one or zero element. Found '2' elements."),
        ('initial_state: [ { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } ]',
         "Field 'name' must be set when using initial_state for state input 'ACC_IN'."),
        ('initial_state: [ { name: "a" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } ]',
         "The data type used for 'initial_state' field of state 'ACC_IN' does not match the state data type."),
        ('initial_state: [ { name: "a" data_type: TYPE_FP32 dims: [ 1 ] data_file: "short.bin" } ]',
         "initial_state setting expects 4 bytes, but the data provided from"),
    ],
)
def test_initial_state_validation(make_repo, start_server, state, message):
    text = BASE_CONFIG.replace('dims: [ 1 ] } ]\n}', f'dims: [ 1 ]\n    {state} }} ]\n}}')
    repo = make_repo([MODEL], {MODEL: text})
    os.makedirs(os.path.join(repo, MODEL, "initial_state"))
    with open(os.path.join(repo, MODEL, "initial_state", "short.bin"), "wb") as f:
        f.write(b"\0\0")
    srv = start_server(repo, "--exit-on-error=false")
    index = srv.http_client().get_model_repository_index()
    assert index[0]["state"] == "UNAVAILABLE"
    assert message in index[0]["reason"], index[0]["reason"]


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_a_state_listed_as_an_output_reaches_the_client(seq_server, proto):
    # Triton's L0_implicit_state test_request_output: the state's output tensor is also
    # a model output; the client gets it and the state still carries over.
    text = config().replace(
        '{ name: "CORRID_OUT" data_type: TYPE_UINT64 dims: [ 1 ] }',
        '{ name: "CORRID_OUT" data_type: TYPE_UINT64 dims: [ 1 ] },\n'
        '  { name: "ACC_OUT" data_type: TYPE_FP32 dims: [ 1 ] }',
    )
    assert "ACC_OUT" in text.split("sequence_batching")[0]
    srv = seq_server(text)
    client = srv.http_client() if proto == "http" else srv.grpc_client()
    mod = httpclient if proto == "http" else grpcclient
    for step, value in enumerate((1.0, 2.0, 4.0)):
        inp = mod.InferInput("INPUT", [1, 1], "FP32")
        inp.set_data_from_numpy(np.array([[value]], np.float32))
        r = client.infer(MODEL, [inp], sequence_id=77, sequence_start=step == 0, sequence_end=step == 2)
        assert float(r.as_numpy("ACC_OUT")[0, 0]) == float(r.as_numpy("OUTPUT")[0, 0])
    assert float(r.as_numpy("OUTPUT")[0, 0]) == 7.0
    assert "ACC_OUT" in [o["name"] for o in srv.http_client().get_model_metadata(MODEL)["outputs"]]
