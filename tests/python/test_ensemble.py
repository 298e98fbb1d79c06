"""Ensembles (reference section 7, checklist 94 and 155-157): `platform: "ensemble"`
with `ensemble_scheduling` steps, load-time validation, loading and unloading with
the composing models, statistics, and ensemble-level response caching, with
tritonclient over HTTP and gRPC.

Fixtures from scripts/make_models.py: `ensemble_add_sub` (add_sub twice: OUTPUT0 =
2*INPUT0, OUTPUT1 = 2*INPUT1) and `ensemble_diamond` (add_sub, then identity_fp32
on both branches concurrently, then add_sub; the same results). Error texts were
measured on Triton 2.51 with python-backend models of the same shapes.

Deliberate differences from Triton 2.51 (each marked again where tested):
- a configuration error of an ensemble is answered with the detail after
  Triton's "failed to poll from model repository" (Triton logs the detail only);
- an ensemble with `response_cache { enable: true }` over a sequence-batched (or
  decoupled) model fails to load, as the seed says the ensemble inherits that
  limitation (Triton 2.51 loads it and would cache a stateful step's answers);
- a failed ensemble request counts once in the ensemble's failures (Triton
  counted it twice);
- outputs come in configuration order, and the response carries no
  sequence_id/sequence_start/sequence_end parameters Triton adds for ensembles.
"""

import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import ADD_SUB_IO, add_sub_config, add_sub_inputs, run_in_threads

F32 = np.float32
A = np.array([[1.0, 2.0, 3.0, 4.0]], F32)
B = np.array([[0.5, -1.0, 10.0, 2.25]], F32)
IO = ADD_SUB_IO


def step(model, inputs, outputs, version=-1):
    maps = "".join(f' input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += "".join(f' output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: {version}{maps} }}'


def ensemble(name, steps, io=IO, extra="", max_batch_size=8):
    return (
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: {max_batch_size}\n{io}{extra}\n'
        f"ensemble_scheduling {{ step [ {', '.join(steps)} ] }}\n"
    )


FIRST = step("add_sub", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "sum", "OUTPUT1": "diff"})
SECOND = step("add_sub", {"INPUT0": "sum", "INPUT1": "diff"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"})
TWO_STEP = [FIRST, SECOND]


def client_for(srv, proto):
    return srv.http_client() if proto == "http" else srv.grpc_client()


def module_of(client):
    return httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient


def infer(client, model, a=A, b=B, **kwargs):
    return client.infer(model, add_sub_inputs(module_of(client), a, b), **kwargs)


def stats(client, model):
    s = client.get_inference_statistics(model)["model_stats"][0]
    counts = {k: v["count"] for k, v in s["inference_stats"].items()}
    counts["inferences"] = s["inference_count"]
    counts["executions"] = s["execution_count"]
    return counts


# --- results ----------------------------------------------------------------------


@pytest.mark.parametrize("proto", ["http", "grpc"])
@pytest.mark.parametrize("model", ["ensemble_add_sub", "ensemble_diamond"])
def test_two_step_and_diamond_give_exact_results(server, proto, model):
    client = client_for(server, proto)
    result = infer(client, model, request_id="ens-1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * A)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 2 * B)
    response = result.get_response() if proto == "http" else result.get_response(as_json=True)
    assert response["id"] == "ens-1"
    assert response["model_name"] == model
    # A batch of 3 and a subset of the outputs.
    a, b = np.arange(12, dtype=F32).reshape(3, 4), np.ones((3, 4), F32)
    mod = module_of(client)
    result = infer(client, model, a, b, outputs=[mod.InferRequestedOutput("OUTPUT1")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 2 * b)
    assert result.as_numpy("OUTPUT0") is None


def test_metadata_and_config(server):
    client = server.http_client()
    meta = client.get_model_metadata("ensemble_diamond")
    assert meta["platform"] == "ensemble"
    assert [i["shape"] for i in meta["inputs"]] == [[-1, 4], [-1, 4]]
    config = client.get_model_config("ensemble_diamond")
    assert config["platform"] == "ensemble" and config["backend"] == ""
    assert config["instance_group"] == []
    assert [s["model_name"] for s in config["ensemble_scheduling"]["step"]] == [
        "add_sub", "identity_fp32", "identity_fp32", "add_sub",
    ]


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_concurrent_requests_get_their_own_answers(server, proto):
    errors, barrier = [], threading.Barrier(8)

    def worker(index):
        client = client_for(server, proto)
        try:
            barrier.wait()
            for round_ in range(10):
                a = np.full((1, 4), index * 100 + round_, F32)
                b = np.arange(4, dtype=F32).reshape(1, 4) * index
                result = infer(client, "ensemble_diamond", a, b)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 2 * b)
        except Exception as e:  # reported below, with the worker's index
            errors.append((index, e))
        finally:
            client.close()

    run_in_threads(worker, 8)
    assert errors == []


# --- a failing step ---------------------------------------------------------------

# identity_fp32 accepts any width; add_sub only 4: width 3 fails in the second step.
RAGGED_IO = """\
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""
FAILING = ensemble(
    "ens_fail",
    [
        step("identity_fp32", {"INPUT0": "INPUT"}, {"OUTPUT0": "copy"}),
        step("add_sub", {"INPUT0": "copy", "INPUT1": "copy"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}),
    ],
    io=RAGGED_IO,
)


@pytest.fixture
def ensembles(make_repo, start_server):
    """A server (local cache on) with the example ensembles plus extra ones."""

    def start(extra=None, *args):
        configs = {"add_sub": add_sub_config(), **(extra or {})}
        repo = make_repo(["identity_fp32", "ensemble_add_sub", "ensemble_diamond"], configs)
        return start_server(repo, "--cache-config", "local,size=1048576", *args)

    return start


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_failing_step_fails_the_request_with_its_error(ensembles, error_of, proto):
    srv = ensembles({"ens_fail": FAILING})
    client = client_for(srv, proto)
    mod = module_of(client)
    good = mod.InferInput("INPUT", [1, 4], "FP32")
    good.set_data_from_numpy(A)
    result = client.infer("ens_fail", [good])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * A)
    bad = mod.InferInput("INPUT", [1, 3], "FP32")
    bad.set_data_from_numpy(A[:, :3].copy())
    e = error_of(client.infer, "ens_fail", [bad], request_id="bad-1")
    # The step's own error (the request id reached the step), prefixed as Triton does.
    assert e.message().startswith(
        "in ensemble 'ens_fail', [request id: bad-1] unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [-1,4], got [1,3]"
    ), e.message()
    assert e.status() == ("400" if proto == "http" else "StatusCode.INVALID_ARGUMENT")
    http = srv.http_client()
    assert stats(http, "ens_fail")["fail"] == 1
    assert stats(http, "ens_fail")["success"] == 1
    assert stats(http, "identity_fp32")["success"] == 2
    failures = [line for line in srv.metrics().splitlines() if line.startswith("nv_inference_request_failure{") and 'model="ens_fail"' in line]
    assert any('reason="OTHER"' in line and line.endswith(" 1") for line in failures), failures


# --- statistics and pass-through ---------------------------------------------------


def test_statistics_count_the_ensemble_once_and_each_step(ensembles):
    srv = ensembles()
    client = srv.http_client()
    for _ in range(3):
        infer(client, "ensemble_diamond")
    infer(client, "ensemble_diamond", np.vstack([A, A]), np.vstack([B, B]))
    ens = stats(client, "ensemble_diamond")
    # As Triton: one execution per ensemble request with its batch size; queue and
    # compute are the sums over the steps, counted once per request.
    assert ens == {
        "success": 4, "fail": 0, "queue": 4, "compute_input": 4, "compute_infer": 4,
        "compute_output": 4, "cache_hit": 0, "cache_miss": 0, "inferences": 5, "executions": 4,
    }
    assert stats(client, "add_sub")["success"] == 8
    assert stats(client, "identity_fp32")["executions"] == 8
    s = client.get_inference_statistics("ensemble_diamond")["model_stats"][0]
    assert {b["batch_size"] for b in s["batch_stats"]} == {1, 2}
    steps_infer = sum(
        client.get_inference_statistics(m)["model_stats"][0]["inference_stats"]["compute_infer"]["ns"]
        for m in ("add_sub", "identity_fp32")
    )
    assert s["inference_stats"]["compute_infer"]["ns"] == steps_infer


SEQUENCE_ENSEMBLE = ensemble(
    "ens_seq",
    [step("sequence_accumulate", {"INPUT": "INPUT"}, {"OUTPUT": "OUTPUT"})],
    io='input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n',
    max_batch_size=4,
)


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_sequence_parameters_pass_through_to_the_steps(make_repo, start_server, proto):
    repo = make_repo(["sequence_accumulate"], {"ens_seq": SEQUENCE_ENSEMBLE})
    client = client_for(start_server(repo), proto)
    mod = module_of(client)
    totals = []
    for value, start, end in ((1.0, True, False), (2.0, False, False), (4.0, False, True)):
        inp = mod.InferInput("INPUT", [1, 1], "FP32")
        inp.set_data_from_numpy(np.array([[value]], F32))
        r = client.infer("ens_seq", [inp], sequence_id=77, sequence_start=start, sequence_end=end)
        totals.append(float(r.as_numpy("OUTPUT")[0, 0]))
    assert totals == [1.0, 3.0, 7.0]


# --- caching ----------------------------------------------------------------------

CACHED_ENSEMBLE = ensemble("ens_cache", TWO_STEP, extra="response_cache { enable: true }")


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_ensemble_cache_hit_skips_every_step(ensembles, proto):
    srv = ensembles({"ens_cache": CACHED_ENSEMBLE})
    client = client_for(srv, proto)
    http = srv.http_client()
    first = infer(client, "ens_cache")
    before = stats(http, "add_sub")
    assert before["executions"] == 2
    second = infer(client, "ens_cache")
    # The same bytes over the other protocol hit the same entry.
    third = infer(srv.grpc_client() if proto == "http" else http, "ens_cache")
    for r in (first, second, third):
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), 2 * A)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), 2 * B)
    # Nothing reached the composing model, which has no cache of its own.
    assert stats(http, "add_sub") == before
    assert stats(http, "add_sub")["cache_hit"] == 0
    assert stats(http, "ens_cache") == {
        "success": 3, "fail": 0, "queue": 1, "compute_input": 1, "compute_infer": 1,
        "compute_output": 1, "cache_hit": 2, "cache_miss": 1, "inferences": 1, "executions": 1,
    }
    assert 'nv_cache_num_hits_per_model{model="ens_cache",version="1"} 2' in srv.metrics()
    # Other inputs miss and run the steps again.
    infer(client, "ens_cache", a=A + 1)
    assert stats(http, "add_sub")["executions"] == 4


def test_ensemble_miss_can_hit_a_cached_step(ensembles):
    cached_add_sub = add_sub_config(extra="response_cache { enable: true }\n")
    srv = ensembles({"add_sub": cached_add_sub, "ens_cache": CACHED_ENSEMBLE})
    client = srv.http_client()
    infer(client, "add_sub")  # caches add_sub(A, B), the ensemble's first step
    result = infer(client, "ens_cache")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * A)
    assert stats(client, "ens_cache")["cache_miss"] == 1
    step_stats = stats(client, "add_sub")
    # The first step hit add_sub's cache; only the second one executed.
    assert step_stats["cache_hit"] == 1
    assert step_stats["executions"] == 2
    # An uncached ensemble over the same model benefits from the step cache too.
    infer(client, "ensemble_add_sub")
    assert stats(client, "add_sub")["cache_hit"] == 3
    assert stats(client, "add_sub")["executions"] == 2


def test_cached_ensemble_over_a_sequence_model_is_refused(make_repo, start_server, error_of):
    config = SEQUENCE_ENSEMBLE.replace('name: "ens_seq"', 'name: "ens_seq_cache"')
    config = config.replace("ensemble_scheduling", "response_cache { enable: true }\nensemble_scheduling")
    repo = make_repo(["sequence_accumulate"], {"ens_seq_cache": config})
    srv = start_server(repo, "--model-control-mode", "explicit", "--cache-config", "local,size=1048576")
    # Deliberate difference: Triton 2.51 loads this ensemble.
    e = error_of(srv.http_client().load_model, "ens_seq_cache")
    assert e.message() == (
        "load failed for model 'ens_seq_cache': Response Cache does not currently support ensemble "
        "ens_seq_cache: its composing model sequence_accumulate uses the sequence batching scheduler, "
        "and the ensemble inherits that limitation. Please disable the response cache."
    )


# --- load-time validation ---------------------------------------------------------

BAD = {
    "ens_unknown": (ensemble("ens_unknown", [FIRST, SECOND.replace('"add_sub"', '"nope"')]),
                    "load failed for model 'ens_unknown': ensemble ens_unknown contains models that are not available or ambiguous: nope"),
    "ens_ghost": (ensemble("ens_ghost", [FIRST, SECOND.replace('value: "diff"', 'value: "ghost"')]),
                  "output 'OUTPUT0' for ensemble 'ens_ghost' is not written: at least one of its depending tensors, 'ghost', is not connected"),
    "ens_unwritten": (ensemble("ens_unwritten", [FIRST, SECOND.replace('value: "OUTPUT1"', 'value: "other"')]),
                      "ensemble output 'OUTPUT1' for ensemble ens_unwritten' is not used"),
    "ens_cycle": (ensemble("ens_cycle", [
        FIRST,
        step("add_sub", {"INPUT0": "sum", "INPUT1": "loop_b"}, {"OUTPUT0": "loop_a", "OUTPUT1": "OUTPUT1"}),
        step("add_sub", {"INPUT0": "loop_a", "INPUT1": "diff"}, {"OUTPUT0": "loop_b", "OUTPUT1": "OUTPUT0"}),
    ]), "output 'OUTPUT0' for ensemble 'ens_cycle' is not written: at least one of its depending tensors, 'loop_b', is not connected"),
    "ens_dtype": (ensemble("ens_dtype", TWO_STEP, io=IO.replace("TYPE_FP32", "TYPE_INT32", 1)),
                  "load failed for model 'ens_dtype': in ensemble ens_dtype, ensemble tensor INPUT0: inconsistent data type: TYPE_INT32 is inferred from model ens_dtype while TYPE_FP32 is inferred from model add_sub"),
    "ens_shape": (ensemble("ens_shape", TWO_STEP, io=IO.replace("dims: [ 4 ]", "dims: [ 3 ]", 1)),
                  "load failed for model 'ens_shape': in ensemble ens_shape, ensemble tensor INPUT0: inconsistent shape: [-1,3] is inferred from model ens_shape while [-1,4] is inferred from model add_sub"),
    "ens_backend": (ensemble("ens_backend", TWO_STEP, extra='backend: "onnxruntime"'),
                    "Ensemble model 'ens_backend' must have platform type 'ensemble' and empty backend type"),
    "ens_instance": (ensemble("ens_instance", TWO_STEP, extra="instance_group [ { count: 1 kind: KIND_CPU } ]"),
                     "instance group should not be specified for ensemble 'ens_instance'"),
    "ens_nosteps": ('name: "ens_nosteps"\nplatform: "ensemble"\nmax_batch_size: 8\n' + IO + "ensemble_scheduling { }\n",
                    "must specify 'step' for ensemble 'ens_nosteps'"),
    # Triton named 'diff' (the order of its unordered map); we check the map sorted.
    "ens_dup": (ensemble("ens_dup", [FIRST, FIRST, SECOND]),
                "ensemble tensor 'sum' can appear in an output map only once for ensemble 'ens_dup' step 1"),
    "ens_badinput": (ensemble("ens_badinput", [FIRST, SECOND.replace('key: "INPUT1"', 'key: "INPUTX"')]),
                     "load failed for model 'ens_badinput': in ensemble ens_badinput, ensemble tensor diff is mapping to non-existing input INPUTX in model add_sub"),
    "ens_badoutput": (ensemble("ens_badoutput", [FIRST, SECOND.replace('key: "OUTPUT0"', 'key: "OUTPUTX"')]),
                      "load failed for model 'ens_badoutput': in ensemble ens_badoutput, ensemble tensor OUTPUT0 is mapped from non-existing output OUTPUTX in model add_sub"),
    "ens_badversion": (ensemble("ens_badversion", [FIRST, SECOND.replace("model_version: -1", "model_version: 7")]),
                       "load failed for model 'ens_badversion': ensemble 'ens_badversion' depends on 'add_sub' whose required version 7 is not loaded."),
    "ens_unused": (ensemble("ens_unused", [
        step("identity_fp32", {"INPUT0": "INPUT0"}, {"OUTPUT0": "OUTPUT0"}),
        step("identity_fp32", {"INPUT0": "INPUT0"}, {"OUTPUT0": "OUTPUT1"}),
    ]), "ensemble input 'INPUT1' for ensemble ens_unused' is not used"),
    "ens_mbs": (ensemble("ens_mbs", TWO_STEP, max_batch_size=16),
                "load failed for model 'ens_mbs': ensemble ens_mbs allows maximum batch size 16, but it contains model add_sub which only allows maximum batch size to be 8"),
    "ens_self": (ensemble("ens_self", [step("ens_self", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"})]),
                 "load failed for model 'ens_self': circular dependency between ensembles: ens_self -> ... -> ens_self -> ens_self"),
    "ens_broken": (ensemble("ens_broken", [step("broken", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"})]),
                   "load failed for model 'ens_broken': ensemble 'ens_broken' depends on 'broken' which has no loaded version. Model 'broken' loading failed with error: version 1 is at UNAVAILABLE state: model input 'INPUT0' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for broken;"),
}
CYCLE = {
    "ens_cyc_a": ensemble("ens_cyc_a", [step("ens_cyc_b", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"})]),
    "ens_cyc_b": ensemble("ens_cyc_b", [step("ens_cyc_a", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"})]),
}
BROKEN = add_sub_config(name="broken").replace("dims: [ 4 ]", "dims: [ 0 ]", 1)


@pytest.fixture(scope="module")
def validation_server(tmp_path_factory):
    import os
    import shutil

    from conftest import EXAMPLE_MODELS, Server, base_args

    repo = tmp_path_factory.mktemp("validation") / "models"
    for name in ("add_sub", "identity_fp32"):
        shutil.copytree(os.path.join(EXAMPLE_MODELS, name), repo / name)
    configs = {name: text for name, (text, _) in BAD.items()} | CYCLE | {"broken": BROKEN}
    for name, text in configs.items():
        shutil.copytree(os.path.join(EXAMPLE_MODELS, "add_sub", "1"), repo / name / "1")
        (repo / name / "config.pbtxt").write_text(text)
    srv = Server(str(repo), base_args(str(repo), ["--model-control-mode", "explicit"]))
    try:
        yield srv.wait_started()
    finally:
        srv.kill()


@pytest.mark.parametrize("name", sorted(BAD))
def test_every_load_time_error_has_tritons_message(validation_server, error_of, name):
    expected = BAD[name][1]
    e = error_of(validation_server.http_client().load_model, name)
    if expected.startswith("load failed"):
        assert e.message() == expected
        assert e.status() == "400"
    else:
        # Deliberate difference: Triton answers only "failed to load '<m>', failed to
        # poll from model repository" (500) and logs the detail; we append it.
        assert e.message() == f"failed to load '{name}', failed to poll from model repository: {expected}"
        assert e.status() == "500"
    index = validation_server.request("POST", "/v2/repository/index", {"ready": False}).json()
    states = {m["name"]: m for m in index}
    assert states[name]["state"] == "UNAVAILABLE"
    assert expected.split(": ", 1)[-1] in states[name]["reason"] or states[name]["reason"] in expected


def test_circular_ensembles_are_refused(validation_server, error_of):
    e = error_of(validation_server.grpc_client().load_model, "ens_cyc_a")
    assert e.message() == (
        "load failed for model 'ens_cyc_a': circular dependency between ensembles: "
        "ens_cyc_a -> ... -> ens_cyc_b -> ens_cyc_a"
    )


# --- loading and unloading --------------------------------------------------------


def ready_models(srv):
    index = srv.request("POST", "/v2/repository/index", {"ready": True}).json()
    return sorted(m["name"] for m in index)


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_loading_an_ensemble_loads_its_models_and_unload_follows_tritons_rules(make_repo, start_server, proto):
    repo = make_repo(["add_sub", "identity_fp32", "ensemble_add_sub", "ensemble_diamond"])
    srv = start_server(repo, "--model-control-mode", "explicit")
    client = client_for(srv, proto)
    client.load_model("ensemble_add_sub")
    assert ready_models(srv) == ["add_sub", "ensemble_add_sub"]
    np.testing.assert_array_equal(infer(client, "ensemble_add_sub").as_numpy("OUTPUT0"), 2 * A)
    # Without unload_dependents the composing model stays.
    client.unload_model("ensemble_add_sub")
    assert ready_models(srv) == ["add_sub"]
    # With it, composing models loaded only for the ensemble go too...
    client.unload_model("add_sub")
    client.load_model("ensemble_add_sub")
    client.unload_model("ensemble_add_sub", unload_dependents=True)
    assert ready_models(srv) == []
    # ...unless another loaded ensemble still uses them.
    client.load_model("ensemble_add_sub")
    client.load_model("ensemble_diamond")
    client.unload_model("ensemble_diamond", unload_dependents=True)
    assert ready_models(srv) == ["add_sub", "ensemble_add_sub"]
    # Unloading a composing model unloads the ensembles that use it (as Triton does,
    # with or without unload_dependents).
    client.load_model("ensemble_diamond")
    client.unload_model("identity_fp32")
    assert ready_models(srv) == ["add_sub", "ensemble_add_sub"]
    # Explicitly loaded composing models stay when their ensemble is unloaded.
    client.load_model("identity_fp32")
    client.load_model("ensemble_diamond")
    client.unload_model("ensemble_diamond", unload_dependents=True)
    assert ready_models(srv) == ["add_sub", "ensemble_add_sub", "identity_fp32"]


def test_reloaded_composing_model_serves_the_ensemble(make_repo, start_server):
    repo = make_repo(["add_sub", "ensemble_add_sub"])
    srv = start_server(repo, "--model-control-mode", "explicit", "--load-model", "ensemble_add_sub")
    client = srv.http_client()
    client.load_model("add_sub")  # a reload: the ensemble looks its steps up per request
    np.testing.assert_array_equal(infer(client, "ensemble_add_sub").as_numpy("OUTPUT1"), 2 * B)
    assert stats(client, "add_sub")["executions"] == 2
