"""Absurd sizes in a model configuration (issue 14, item 4): every size that would
size an allocation or a thread count is bounded at load. A model with a value over
its limit fails to load with a message naming the field, the value and the limit,
while the server keeps serving and stays small. One server in explicit mode tries
every bad model through the load API, so the file runs in seconds. (Nereid's own
limits: Triton has none and exhausts memory the same way.)"""

import os
import shutil

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import EXAMPLE_MODELS, Server, add_sub_config, add_sub_inputs, base_args

# The whole server's resident memory and threads after every bad load; before the
# bounds, 1e7 candidate sequences alone took 740 MB and `count: 2000` 4000 threads.
MAX_RSS_MB = 300
MAX_THREADS = 100

SEQUENCE = open(os.path.join(EXAMPLE_MODELS, "sequence_accumulate", "config.pbtxt")).read()
STATEFUL = open(os.path.join(EXAMPLE_MODELS, "accumulate_fp32", "config.pbtxt")).read()


def sequence(name, oldest="", state_dims="1", initial=""):
    """sequence_accumulate under `name`, with an oldest section and its state's dims."""
    text = SEQUENCE.replace('name: "sequence_accumulate"', f'name: "{name}"')
    if oldest:
        text = text.replace("sequence_batching {", f"sequence_batching {{\n  oldest {{ {oldest} }}")
    return text.replace(
        "data_type: TYPE_FP32 dims: [ 1 ] } ]\n}",
        f"data_type: TYPE_FP32 dims: [ {state_dims} ] {initial} }} ]\n}}",
    )


# name -> (graph to copy, config.pbtxt, expected message)
BAD = {
    "candidates": (
        "sequence_accumulate",
        sequence("candidates", "max_candidate_sequences: 2000000000"),
        "sequence_batching.oldest.max_candidate_sequences 2000000000 exceeds the limit of 1048576",
    ),
    "slots": (
        "sequence_accumulate",
        sequence("slots", "max_candidate_sequences: 1048576").replace("count: 1", "count: 2"),
        "sequence slots (sequence_batching.oldest.max_candidate_sequences × instances) "
        "1048576 × 2 = 2097152 exceeds the limit of 1048576",
    ),
    "stateful_candidates": (
        "accumulate_fp32",
        STATEFUL.replace('"accumulate_fp32"', '"stateful_candidates"').replace(
            "max_candidate_sequences: 1280", "max_candidate_sequences: 100000000"
        ),
        "sequence_batching.oldest.max_candidate_sequences 100000000 exceeds the limit of 1048576",
    ),
    "state_dims": (
        "sequence_accumulate",
        sequence("state_dims", state_dims="100000, 100000"),
        "sequence_batching.state[0].dims [100000, 100000] (40000000000 bytes of FP32) "
        "exceeds the limit of 1073741824 bytes",
    ),
    "initial_state_dims": (
        "sequence_accumulate",
        sequence(
            "initial_state_dims",
            state_dims="-1",
            initial='initial_state { name: "i" data_type: TYPE_FP32 dims: [ 4000000000 ] '
            'zero_data: true }',
        ),
        "sequence_batching.state[0].initial_state.dims [4000000000] (16000000000 bytes of FP32) "
        "exceeds the limit of 1073741824 bytes",
    ),
    "instances": (
        "add_sub",
        add_sub_config(name="instances", count=2000),
        "instance_group count (all groups together) 2000 exceeds the limit of 256",
    ),
    "batch": (
        "add_sub",
        add_sub_config(name="batch", max_batch_size=2000000000),
        "max_batch_size 2000000000 exceeds the limit of 1048576",
    ),
}

# Any number of priority levels loads, as in Triton (L0_model_queue's u64::MAX): a level
# has a queue only while requests wait at it.
PRIORITIES = add_sub_config(
    name="priorities",
    extra="dynamic_batching { priority_levels: 18446744073709551615 default_priority_level: 1 }",
)


def add_model(repo, name, graph, config):
    shutil.copytree(os.path.join(EXAMPLE_MODELS, graph, "1"), os.path.join(repo, name, "1"))
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(config)


@pytest.fixture(scope="module")
def bounded(tmp_path_factory):
    """One explicit-mode server serving add_sub, with every bad model in its repository
    and one whose initial state is read from a link to /dev/zero."""

    repo = str(tmp_path_factory.mktemp("bounds") / "models")
    shutil.copytree(os.path.join(EXAMPLE_MODELS, "add_sub"), os.path.join(repo, "add_sub"))
    for name, (graph, config, _) in BAD.items():
        add_model(repo, name, graph, config)
    add_model(repo, "priorities", "add_sub", PRIORITIES)
    endless = sequence(
        "endless_initial_state",
        initial='initial_state { name: "i" data_type: TYPE_FP32 dims: [ 1 ] data_file: "zero" }',
    )
    add_model(repo, "endless_initial_state", "sequence_accumulate", endless)
    os.makedirs(os.path.join(repo, "endless_initial_state", "initial_state"))
    os.symlink("/dev/zero", os.path.join(repo, "endless_initial_state", "initial_state", "zero"))
    server = Server(
        repo, base_args(repo, ["--model-control-mode", "explicit", "--load-model", "add_sub"])
    )
    try:
        yield server.wait_started()
    finally:
        server.kill()


def status(server):
    fields = {}
    with open(f"/proc/{server.proc.pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.split()[0] if value.split() else ""

    return fields


def assert_healthy(server):
    """The server still answers add_sub, with its peak memory and threads small."""
    client = server.http_client()
    try:
        a = np.arange(4, dtype=np.float32).reshape(1, 4)
        result = client.infer("add_sub", add_sub_inputs(httpclient, a, a))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    finally:
        client.close()
    fields = status(server)
    assert int(fields["VmHWM"]) // 1024 < MAX_RSS_MB, fields
    assert int(fields["Threads"]) < MAX_THREADS, fields


@pytest.mark.parametrize("name", sorted(BAD))
def test_an_absurd_size_fails_the_load_naming_field_and_limit(bounded, name):
    resp = bounded.request("POST", f"/v2/repository/models/{name}/load")
    assert resp.status == 400, resp
    message = resp.json()["error"]
    assert f"model '{name}': {BAD[name][2]}" in message, message
    ready = bounded.request("GET", f"/v2/models/{name}/ready")
    assert ready.status != 200, ready
    assert_healthy(bounded)


def test_an_endless_initial_state_file_is_read_only_as_far_as_needed(bounded):
    resp = bounded.request("POST", "/v2/repository/models/endless_initial_state/load")
    assert resp.status == 200, resp
    assert_healthy(bounded)


def test_any_number_of_priority_levels_loads_and_costs_nothing_until_used(bounded):
    resp = bounded.request("POST", "/v2/repository/models/priorities/load")
    assert resp.status == 200, resp
    client = bounded.http_client()
    try:
        a = np.arange(4, dtype=np.float32).reshape(1, 4)
        for priority in (2**64 - 1, 1, 0):
            result = client.infer("priorities", add_sub_inputs(httpclient, a, a), priority=priority)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    finally:
        client.close()
    assert_healthy(bounded)
