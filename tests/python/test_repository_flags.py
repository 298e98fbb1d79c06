"""tritonserver's model-repository flags and repository agents through the real binary:
--model-config-name (start-up, a poll of an edited configs/<name>.pbtxt, the load API),
--model-load-thread-count and --model-load-retry-count (a tiny TRITONBACKEND library built
here with `cc`: model loads that take a while and count how many run at once, and a model
that fails its first loads), --model-namespacing (an ensemble in each of two repositories
over a model of the same name), and the built-in `checksum` repository agent (a match, a
mismatch) beside an agent that is not there. Triton 2.51's answers were read from a real
Triton for the ambiguity, index and statistics cases; the checksum agent's words are those
of triton-inference-server/checksum_repository_agent.
"""

import hashlib
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import tritonclient.http as httpclient

from conftest import EXAMPLE_MODELS, add_sub_config

F32 = np.float32

# Model initialization that sleeps (models named slow*) while counting the loads in flight,
# or fails twice before it succeeds (models named flaky*). Declared from the ABI alone.
BACKEND_SOURCE = r"""
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct Error Error;
typedef struct Model Model;
typedef struct Instance Instance;
typedef struct Request Request;
extern Error* TRITONSERVER_ErrorNew(int code, const char* msg);
extern Error* TRITONBACKEND_ModelName(Model*, const char**);
extern Error* TRITONBACKEND_RequestRelease(Request*, uint32_t);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int running = 0, flaky_failures = 2;

Error* TRITONBACKEND_ModelInitialize(Model* model) {
  const char* name = NULL;
  Error* err = TRITONBACKEND_ModelName(model, &name);
  if (err != NULL) return err;
  if (strncmp(name, "flaky", 5) == 0) {
    pthread_mutex_lock(&lock);
    int fail = flaky_failures > 0;
    if (fail) flaky_failures--;
    pthread_mutex_unlock(&lock);
    return fail ? TRITONSERVER_ErrorNew(1, "flaky model failed on purpose") : NULL;
  }
  pthread_mutex_lock(&lock);
  int now = ++running;
  pthread_mutex_unlock(&lock);
  fprintf(stderr, "slow model load %s: %d loading\n", name, now);
  usleep(300000);
  pthread_mutex_lock(&lock);
  running--;
  pthread_mutex_unlock(&lock);
  return NULL;
}

Error* TRITONBACKEND_ModelInstanceExecute(Instance* instance, Request** requests, uint32_t n) {
  (void)instance;
  for (uint32_t i = 0; i < n; i++) TRITONBACKEND_RequestRelease(requests[i], 1);
  return NULL;
}
"""

BACKEND = "repo_flags_test"
SLOW_LOAD = re.compile(r"slow model load (\w+): (\d+) loading")


def need(condition, why):
    """Skip when a dependency is missing; under CI=true that is a failure instead."""
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why} (CI must run this test)")
    pytest.skip(why)


@pytest.fixture(scope="module")
def backend_dir(tmp_path_factory):
    need(shutil.which("cc") is not None, "no C compiler (cc) to build the test backend")
    directory = tmp_path_factory.mktemp("backends")
    source = directory / "backend.c"
    source.write_text(BACKEND_SOURCE)
    target = directory / BACKEND / f"libtriton_{BACKEND}.so"
    target.parent.mkdir()
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(target),
                    str(source), "-lpthread"], check=True)
    return str(directory)


def backend_model(repo, name):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "{BACKEND}"\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]\n')


def max_batch_size(srv, name):
    return srv.http_client().get_model_config(name)["max_batch_size"]


def index(srv):
    resp = srv.request("POST", "/v2/repository/index", body={})
    assert resp.status == 200, resp
    return resp.json()


def test_model_config_name_picks_configs_name_pbtxt_where_it_exists(
        make_repo, start_server, poll):
    repo = make_repo(["add_sub", "identity_fp32"])
    configs = os.path.join(repo, "add_sub", "configs")
    os.mkdir(configs)
    custom = os.path.join(configs, "h100.pbtxt")
    with open(custom, "w") as f:
        f.write(add_sub_config(max_batch_size=4))
    srv = start_server(repo, "--model-config-name=h100", "--model-control-mode=poll",
                       "--repository-poll-secs=1")
    assert max_batch_size(srv, "add_sub") == 4
    assert max_batch_size(srv, "identity_fp32") == 8, "no configs/h100.pbtxt: config.pbtxt"
    # An edit of the custom file is a change: the next poll reloads the model with it.
    with open(custom, "w") as f:
        f.write(add_sub_config(max_batch_size=2))
    poll(lambda: max_batch_size(srv, "add_sub") == 2, timeout=15, what="the poll's reload")
    srv.kill()

    # The load API reads it too.
    srv = start_server(repo, "--model-config-name=h100", "--model-control-mode=explicit")
    client = srv.http_client()
    client.load_model("add_sub")
    assert max_batch_size(srv, "add_sub") == 2


def test_model_load_thread_count_bounds_the_loads_in_flight(backend_dir, tmp_path, start_server):
    repo = tmp_path / "slow"
    for name in ("slow_a", "slow_b", "slow_c"):
        backend_model(repo, name)
    most = {}
    for threads in (1, 3):
        srv = start_server(str(repo), "--backend-directory", backend_dir,
                           f"--model-load-thread-count={threads}")
        counts = [int(m.group(2)) for m in SLOW_LOAD.finditer(srv.log())]
        assert len(counts) == 3, srv.log()
        most[threads] = max(counts)
        srv.kill()
    assert most[1] == 1, most
    assert most[3] >= 2, most


def test_model_load_retry_count_retries_a_failed_load(backend_dir, tmp_path, start_server):
    repo = tmp_path / "flaky"
    backend_model(repo, "flaky")
    # The model fails its first two loads: two retries load it.
    srv = start_server(str(repo), "--backend-directory", backend_dir,
                       "--model-load-retry-count=2")
    assert srv.http_client().is_model_ready("flaky")
    assert srv.log().count("flaky model failed on purpose; retrying") == 2, srv.log()
    srv.kill()
    # One retry is not enough: the model is unavailable with the backend's reason.
    srv = start_server(str(repo), "--backend-directory", backend_dir,
                       "--model-load-retry-count=1", "--exit-on-error=false",
                       "--strict-readiness=false")
    assert not srv.http_client().is_model_ready("flaky")
    [row] = index(srv)
    assert row["state"] == "UNAVAILABLE"
    assert "flaky model failed on purpose" in row["reason"], row


ENSEMBLE = """name: "{name}"
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "A" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] }} ]
ensemble_scheduling {{ step [ {{ model_name: "add_sub" model_version: -1
  {inputs} output_map {{ key: "OUTPUT0" value: "SUM" }} }} ] }}
"""


def test_model_namespacing_resolves_each_ensemble_in_its_own_repository(
        tmp_path, start_server, error_of):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    # Repository a: add_sub and an ensemble over it (SUM = A + A).
    shutil.copytree(os.path.join(EXAMPLE_MODELS, "add_sub"), a / "add_sub")
    (a / "ens_a" / "1").mkdir(parents=True)
    (a / "ens_a" / "config.pbtxt").write_text(ENSEMBLE.format(
        name="ens_a",
        inputs='input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "A" }'))
    # Repository b: an identity graph also called add_sub, and its ensemble (SUM = A).
    shutil.copytree(os.path.join(EXAMPLE_MODELS, "identity_fp32"), b / "add_sub")
    config = (b / "add_sub" / "config.pbtxt").read_text()
    (b / "add_sub" / "config.pbtxt").write_text(config.replace('"identity_fp32"', '"add_sub"'))
    (b / "ens_b" / "1").mkdir(parents=True)
    (b / "ens_b" / "config.pbtxt").write_text(ENSEMBLE.format(
        name="ens_b", inputs='input_map { key: "INPUT0" value: "A" }'))

    srv = start_server(str(a), "--model-repository", str(b), "--model-namespacing=true")
    client = srv.http_client()
    value = np.array([[1, 2, 3, 4]], dtype=F32)
    for ensemble, expected in (("ens_a", value * 2), ("ens_b", value)):
        inp = httpclient.InferInput("A", [1, 4], "FP32")
        inp.set_data_from_numpy(value)
        result = client.infer(ensemble, [inp])
        np.testing.assert_array_equal(result.as_numpy("SUM"), expected)
    # As Triton, the published ensemble names the namespace of each step's model.
    step = client.get_model_config("ens_a")["ensemble_scheduling"]["step"][0]
    assert step["model_namespace"] == str(a)

    # The name held by two namespaces is ambiguous for a request (Triton 2.51's words);
    # the index lists each.
    ambiguous = ("There are 2 identifiers of model 'add_sub' in global map, model namespace "
                 "must be provided to resolve ambiguity.")
    inputs = [httpclient.InferInput("INPUT0", [1, 4], "FP32")]
    inputs[0].set_data_from_numpy(value)
    e = error_of(client.infer, "add_sub", inputs)
    assert (e.status(), e.message()) == ("400", ambiguous)
    resp = srv.request("GET", "/v2/models/add_sub")
    assert (resp.status, resp.json()) == (400, {"error": ambiguous})
    resp = srv.request("GET", "/v2/models/add_sub/stats")
    assert (resp.status, resp.json()) == (400, {"error": "requested model 'add_sub' is not available"})
    rows = index(srv)
    assert [r["name"] for r in rows].count("add_sub") == 2, rows
    assert all(r["state"] == "READY" for r in rows), rows
    # Nereid deliberately differs here: Triton 2.51's statistics of every model fail
    # with namespacing ("Request for unknown model: '<repo>::add_sub' is not found");
    # Nereid lists each model, the shared name twice.
    resp = srv.request("GET", "/v2/models/stats")
    assert resp.status == 200, resp
    names = [m["name"] for m in resp.json()["model_stats"]]
    assert names.count("add_sub") == 2, names


def agent_config(name, agents):
    return add_sub_config(name=name, extra=f"model_repository_agents {{ agents [ {agents} ] }}\n")


def test_checksum_agent_and_missing_agents(make_repo, start_server, tmp_path, error_of):
    with open(os.path.join(EXAMPLE_MODELS, "add_sub", "1", "model.onnx"), "rb") as f:
        digest = hashlib.md5(f.read()).hexdigest()
    checksum = 'name: "checksum" parameters {{ key: "MD5:1/model.onnx" value: "{}" }}'
    repo = make_repo([], {
        "matching": agent_config("matching", "{ " + checksum.format(digest) + " }"),
        "mismatched": agent_config("mismatched", "{ " + checksum.format("0" * 32) + " }"),
        "missing_file": agent_config(
            "missing_file", '{ name: "checksum" parameters { key: "MD5:1/nope" value: "0" } }'),
        "other_agent": agent_config("other_agent", '{ name: "decrypt" }'),
    })
    agents = tmp_path / "repoagents"
    agents.mkdir()
    srv = start_server(repo, "--model-control-mode=explicit", f"--repoagent-directory={agents}")
    client = srv.http_client()
    client.load_model("matching")
    assert client.is_model_ready("matching")
    polled = "failed to load '{}', failed to poll from model repository: {}"
    for name, reason in (
        ("mismatched",
         f"Mismatched MD5 hash for file 1/model.onnx, expect: {'0' * 32}, got: {digest}"),
        ("missing_file", "failed to open text file for read 1/nope: No such file or directory"),
        ("other_agent",
         f"unable to find 'libtritonrepoagent_decrypt.so' for repo agent 'decrypt', searched: {agents}"),
    ):
        e = error_of(client.load_model, name)
        assert e.message() == polled.format(name, reason), name
        assert not client.is_model_ready(name)
    # Triton's line from its poll of the directory (L0_repoagent_checksum greps it).
    assert ("Poll failed for model directory 'mismatched': Mismatched MD5 hash for file "
            "1/model.onnx") in srv.log()
    rows = {r["name"]: r for r in index(srv)}
    assert rows["mismatched"]["state"] == "UNAVAILABLE"
    assert rows["mismatched"]["reason"].startswith("Mismatched MD5 hash for file 1/model.onnx")
