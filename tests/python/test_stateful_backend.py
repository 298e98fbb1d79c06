"""The stateful backend (`backend: "stateful"`) with the example model accumulate_fp32:
state kept per sequence by the server, reset at START, lazy or eager state buffers,
FP16 state storage, infer_end_requests, refusal beyond the use ratio, idle release,
reload, and the load-time checks."""

import os
import queue
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import EXAMPLE_MODELS, REPO_ROOT, wait_for

MODEL = "accumulate_fp32"
BASE_CONFIG = open(os.path.join(EXAMPLE_MODELS, MODEL, "config.pbtxt")).read()


def param(key, value):
    return f'  {{ key: "{key}" value: {{ string_value: "{value}" }} }}'


def config(params=None, drop=(), replace=None):
    """The example's config with parameters set or dropped and text replaced."""
    text = BASE_CONFIG
    for old, new in (replace or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    lines = text.splitlines()
    keys = set(drop) | set(params or {})
    lines = [l for l in lines if not any(f'key: "{k}"' in l for k in keys)]
    text = ("\n".join(lines) + "\n").replace("},\n]", "}\n]")
    extra = [param(k, v) for k, v in (params or {}).items()]
    if extra:
        # The parameter list ends with its last entry (no trailing comma) then "]".
        head, tail = text.rsplit("}\n]", 1)
        text = head + "},\n" + ",\n".join(extra) + "\n]" + tail
    return text


def segment(rng):
    return rng.uniform(-1, 1, (4, 5)).astype(np.float32)


class Simulation:
    """The model's running state per sequence."""

    def __init__(self):
        self.state = {}

    def step(self, seq, data, start):
        previous = np.zeros(5, np.float32) if start else self.state[seq]
        self.state[seq] = previous + data.sum(axis=0)
        return data + self.state[seq]


def infer(client, seq, data, start=False, end=False, model=MODEL):
    mod = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    inp = mod.InferInput("Input", [1, 4, 1, 5], "FP32")
    inp.set_data_from_numpy(data.reshape(1, 4, 1, 5))
    result = client.infer(model, [inp], sequence_id=seq, sequence_start=start, sequence_end=end)
    return result.as_numpy("Output")


def gauge(srv, name, model=MODEL):
    for line in srv.metrics().splitlines():
        if line.startswith(f'{name}{{model="{model}"'):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture
def stateful_server(make_repo, start_server):
    def start(text=None, *args, models=(MODEL,)):
        configs = {MODEL: text} if text else None
        return start_server(make_repo(list(models), configs), *args)

    return start


def test_example_client_passes(server):
    out = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "examples", "clients", "stateful_accumulate.py"),
         "--url", server.grpc_url, "--sequences", "3", "--segments", "4"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().endswith("PASSED")


def test_metadata_shows_only_client_tensors(http_client):
    meta = http_client.get_model_metadata(MODEL)
    assert meta["platform"] == "stateful"
    assert [i["name"] for i in meta["inputs"]] == ["Input"]
    assert [o["name"] for o in meta["outputs"]] == ["Output"]
    assert meta["inputs"][0]["shape"] == [-1, 4, -1, 5]


def test_interleaved_sequences_on_a_grpc_stream_get_their_own_sums(server):
    rng = np.random.default_rng(1)
    sim = Simulation()
    ids = list(range(1000, 1024))
    results = queue.Queue()
    client = server.grpc_client()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    expected = {}
    steps = 6
    for step in range(steps):
        for seq in ids:
            data = segment(rng)
            expected[f"{seq}/{step}"] = sim.step(seq, data, step == 0)
            inp = grpcclient.InferInput("Input", [1, 4, 1, 5], "FP32")
            inp.set_data_from_numpy(data.reshape(1, 4, 1, 5))
            client.async_stream_infer(MODEL, [inp], request_id=f"{seq}/{step}", sequence_id=seq,
                                      sequence_start=step == 0)
    for _ in range(len(expected)):
        r, e = results.get(timeout=30)
        assert e is None, e
        rid = r.get_response().id
        np.testing.assert_allclose(r.as_numpy("Output").reshape(4, 5), expected.pop(rid), atol=1e-5)
    client.stop_stream()
    # End them (the example does not infer END requests: empty answers).
    for seq in ids:
        assert infer(client, seq, np.zeros((4, 5), np.float32), end=True).size == 0
    client.close()


def test_concurrent_http_sequences_get_their_own_sums(server):
    rng = np.random.default_rng(2)
    data = {seq: [segment(rng) for _ in range(8)] for seq in range(2000, 2012)}
    failures = []

    def run(seq):
        sim = Simulation()
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            for step, d in enumerate(data[seq]):
                got = infer(client, seq, d, start=step == 0)
                want = sim.step(seq, d, step == 0)
                if not np.allclose(got.reshape(4, 5), want, atol=1e-5):
                    failures.append((seq, step))
            infer(client, seq, np.zeros((4, 5), np.float32), end=True)
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append((seq, repr(e)))
        finally:
            client.close()

    threads = [threading.Thread(target=run, args=(s,)) for s in data]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_start_resets_the_state(http_client):
    rng = np.random.default_rng(3)
    sim = Simulation()
    seq = 3000
    for step in range(3):
        d = segment(rng)
        np.testing.assert_allclose(infer(http_client, seq, d, start=step == 0).reshape(4, 5), sim.step(seq, d, step == 0), atol=1e-5)
    # START again on the same ID: the model starts from zero.
    d = segment(rng)
    np.testing.assert_allclose(infer(http_client, seq, d, start=True).reshape(4, 5), sim.step(seq, d, True), atol=1e-5)
    infer(http_client, seq, d, end=True)


def test_end_request_is_not_run_when_infer_end_requests_is_0(server, http_client, error_of):
    seq = 3100
    d = np.ones((4, 5), np.float32)
    infer(http_client, seq, d, start=True)
    before = http_client.get_inference_statistics(MODEL)["model_stats"][0]["execution_count"]
    out = infer(http_client, seq, d, end=True)
    assert out.shape == (1, 4, 0, 5) and out.size == 0
    after = http_client.get_inference_statistics(MODEL)["model_stats"][0]["execution_count"]
    assert after == before
    # The sequence is over: a request without START is refused.
    message = str(error_of(infer, http_client, seq, d))
    assert "must specify the START flag" in message


def test_end_request_runs_when_infer_end_requests_is_1(stateful_server):
    srv = stateful_server(config({"infer_end_requests": "1"}))
    client = srv.http_client()
    sim = Simulation()
    d = np.full((4, 5), 0.5, np.float32)
    infer(client, 1, d, start=True)
    sim.step(1, d, True)
    last = infer(client, 1, d, end=True)
    np.testing.assert_allclose(last.reshape(4, 5), sim.step(1, d, False), atol=1e-6)
    wait_for(lambda: gauge(srv, "nv_stateful_sequences") == 0, what="state freed at END")


def test_fp16_state_storage_stays_within_fp16_tolerance(stateful_server):
    srv = stateful_server(config({"store_states_as_fp16": "1", "infer_end_requests": "1"}, drop=LAZY))
    client = srv.grpc_client()
    rng = np.random.default_rng(4)
    sim = Simulation()
    exact_equal = True
    for step in range(20):
        d = (segment(rng) * 37.3).astype(np.float32)
        got = infer(client, 7, d, start=step == 0, end=step == 19).reshape(4, 5)
        want = sim.step(7, d, step == 0)
        # Each stored state is rounded to FP16 (11 significant bits) before the next step.
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=0.05 * (step + 1))
        exact_equal &= bool(np.array_equal(got, want))
    assert not exact_equal, "FP16 storage should round the state"
    # Eager: 2 instances × floor(1280 × 0.9) sequences × 5 values × 2 bytes.
    assert gauge(srv, "nv_stateful_state_bytes") == 2 * 1152 * 5 * 2


LAZY = ["initial_buffer_size", "subsequent_buffer_size", "buffer_alloc_threshold", "buffer_dealloc_threshold"]


def test_eager_allocation_reserves_every_slot_at_load(stateful_server):
    srv = stateful_server(config(drop=LAZY))
    assert gauge(srv, "nv_stateful_state_buffers") == 2
    assert gauge(srv, "nv_stateful_sequence_capacity") == 2 * 1152
    assert gauge(srv, "nv_stateful_state_bytes") == 2 * 1152 * 20


def test_lazy_allocation_grows_and_shrinks_as_specified(stateful_server):
    # One instance, batches of 2; 1 + (20 - 4) / 2 = 9 buffers at most.
    text = config(
        {"initial_buffer_size": "4", "subsequent_buffer_size": "2", "buffer_alloc_threshold": "2",
         "buffer_dealloc_threshold": "3", "max_candidate_sequence_use_ratio": "1.0"},
        replace={"max_batch_size: 16": "max_batch_size: 2", "max_candidate_sequences: 1280": "max_candidate_sequences: 20",
                 "count: 2 kind: KIND_CPU": "count: 1 kind: KIND_CPU"},
    )
    srv = stateful_server(text)
    client = srv.http_client()
    d = np.ones((4, 5), np.float32)
    buffers = lambda: gauge(srv, "nv_stateful_state_buffers")
    assert buffers() == 1 and gauge(srv, "nv_stateful_state_bytes") == 4 * 20
    for seq in (1, 2):
        infer(client, seq, d, start=True)
    assert buffers() == 1  # 2 free, not below the threshold of 2
    infer(client, 3, d, start=True)
    wait_for(lambda: buffers() == 2, what="a buffer added below the threshold")
    for seq in (4, 5, 6):
        infer(client, seq, d, start=True)
    wait_for(lambda: buffers() == 3, what="another buffer")
    assert gauge(srv, "nv_stateful_sequences") == 6
    assert gauge(srv, "nv_stateful_state_bytes") == 8 * 20
    # Sequences 1-4 sit in the first buffer, 5 and 6 in the second; the third is empty.
    infer(client, 1, d, end=True)
    assert buffers() == 3  # 3 free: not above the deallocation threshold of 3
    infer(client, 2, d, end=True)
    wait_for(lambda: buffers() == 2, what="the empty last buffer released")
    for seq in (3, 4):
        infer(client, seq, d, end=True)
    assert buffers() == 2  # 6 free, but the last buffer holds sequences 5 and 6
    for seq in (5, 6):
        infer(client, seq, d, end=True)
    wait_for(lambda: buffers() == 1, what="buffers released down to the initial one")
    assert "released the last state buffer" in srv.log()
    assert "allocated a state buffer" in srv.log()


def test_new_sequences_beyond_the_use_ratio_are_refused_at_once(stateful_server, error_of):
    text = config(
        {"max_candidate_sequence_use_ratio": "0.5"},
        drop=LAZY,
        replace={"max_candidate_sequences: 1280": "max_candidate_sequences: 4", "count: 2 kind: KIND_CPU": "count: 1 kind: KIND_CPU"},
    )
    srv = stateful_server(text)
    client = srv.grpc_client()
    d = np.ones((4, 5), np.float32)
    infer(client, 1, d, start=True)
    infer(client, 2, d, start=True)
    started = time.monotonic()
    message = str(error_of(infer, client, 3, d, start=True))
    assert time.monotonic() - started < 1.0
    assert "Too many simultaneous connections" in message and "UNAVAILABLE" in message
    # The two live sequences are unaffected, and a freed slot takes a new sequence.
    infer(client, 1, d)
    infer(client, 1, d, end=True)
    infer(client, 3, d, start=True)
    assert gauge(srv, "nv_sequence_backlog") == 0


def test_idle_sequences_free_their_state(stateful_server):
    srv = stateful_server(config(replace={"max_sequence_idle_microseconds: 100000000": "max_sequence_idle_microseconds: 300000"}))
    client = srv.http_client()
    infer(client, 9, np.ones((4, 5), np.float32), start=True)
    assert gauge(srv, "nv_stateful_sequences") == 1
    wait_for(lambda: gauge(srv, "nv_stateful_sequences") == 0, what="idle state released")


def test_padding_to_max_batch_keeps_results_exact(stateful_server):
    # --log-verbose shows the backend's per-execution line, which says how many rows ran.
    srv = stateful_server(config({"always_pad_to_max_batch": "1"}), "--log-verbose=1")
    client = srv.http_client()
    rng = np.random.default_rng(5)
    sim = Simulation()
    for step in range(3):
        d = segment(rng)
        np.testing.assert_allclose(infer(client, 5, d, start=step == 0).reshape(4, 5), sim.step(5, d, step == 0), atol=1e-5)
    batches = client.get_inference_statistics(MODEL)["model_stats"][0]["batch_stats"]
    assert [b["batch_size"] for b in batches] == [1]
    wait_for(lambda: srv.log().count("stateful batch: 1 sequences, 16 rows run") == 3, what="padded executions")


def test_one_step_per_request(http_client, error_of):
    inp = httpclient.InferInput("Input", [1, 4, 2, 5], "FP32")
    inp.set_data_from_numpy(np.zeros((1, 4, 2, 5), np.float32))
    message = str(error_of(http_client.infer, MODEL, [inp], sequence_id=3200, sequence_start=True))
    assert "must be 1" in message


def test_reload_and_coexistence_with_the_onnxruntime_backend(stateful_server):
    srv = stateful_server(None, "--model-control-mode=explicit", models=(MODEL, "add_sub"))
    client = srv.http_client()
    d = np.ones((4, 5), np.float32)
    for round_ in range(3):
        client.load_model(MODEL)
        client.load_model("add_sub")
        sim = Simulation()
        for step in range(3):
            np.testing.assert_allclose(infer(client, 1, d, start=step == 0).reshape(4, 5), sim.step(1, d, step == 0))
        a = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        a.set_data_from_numpy(np.ones((1, 4), np.float32))
        b = httpclient.InferInput("INPUT1", [1, 4], "FP32")
        b.set_data_from_numpy(np.ones((1, 4), np.float32))
        assert client.infer("add_sub", [a, b]).as_numpy("OUTPUT0").tolist() == [[2.0] * 4]
        client.unload_model(MODEL)
        wait_for(lambda: not client.is_model_ready(MODEL), what=f"unload {round_}")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"params": {"state_pairs": "<<<Accumulate_In Accumulate_Out>>>"}}, "exactly two names"),
        ({"params": {"state_pairs": "<<<Accumulate_In, Accumulate_Out>>"}}, "no '>>>'"),
        ({"params": {"state_pairs": "<<<Acc_In, Accumulate_Out>>>"}}, "no state input named 'Acc_In'"),
        ({"drop": ["buffer_dealloc_threshold"]}, "missing: buffer_dealloc_threshold"),
        ({"params": {"initial_buffer_size": "8"}}, "Initial buffer size must be larger than or equal to the max batch size"),
        ({"params": {"max_candidate_sequence_use_ratio": "2"}}, "max_candidate_sequence_use_ratio"),
        ({"replace": {"oldest { max_candidate_sequences: 1280 max_queue_delay_microseconds: 2000 }": "direct { }"}}, "only the oldest"),
        ({"replace": {"CONTROL_SEQUENCE_START": "CONTROL_SEQUENCE_READY"}}, "CONTROL_SEQUENCE_START"),
        ({"replace": {"dims: [ 4, -1, 5 ] } ]\noutput": "dims: [ 4, 1, 5 ] } ]\noutput"}}, "do not match"),
        ({"params": {"onnx_file_name": "missing.onnx"}}, "missing.onnx"),
    ],
)
def test_load_errors_are_precise(stateful_server, error_of, change, message):
    srv = stateful_server(config(change.get("params"), change.get("drop", ()), change.get("replace")),
                          "--model-control-mode=explicit")
    error = str(error_of(srv.http_client().load_model, MODEL))
    assert message in error, error


def test_unknown_parameters_are_warned_about(stateful_server):
    srv = stateful_server(config({"error_inject_rate": "15", "no_such_key": "1"}))
    assert srv.http_client().is_model_ready(MODEL)
    log = srv.log()
    assert re.search(r"unknown parameter.*no_such_key", log), log
    assert "error_inject_rate" in log


def test_metric_logging_every_period(stateful_server):
    srv = stateful_server(config({"metric_logging_frequency_seconds": "1", "detailed_metrics_logging_level": "INFO"}))
    client = srv.http_client()
    d = np.ones((4, 5), np.float32)
    infer(client, 1, d, start=True)
    time.sleep(1.1)
    infer(client, 1, d)
    wait_for(lambda: "stateful metrics: 2 executions" in srv.log(), what="the periodic summary")
    assert "average inference" in srv.log()
