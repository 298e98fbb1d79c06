"""Scale out: three nereid replicas behind HAProxy (deploy/haproxy/haproxy.cfg), on
loopback, with one shared redis-server as their response cache; tritonclient talks
to the proxy as it would to one server.

- Stateless requests go to any replica, and a response cached by one replica is a
  hit on every other (the cache lives in Redis).
- A sequence stays on one replica: one gRPC stream per sequence, or unary requests
  carrying an `x-sequence-id` header that the proxy hashes (consistent hashing).
- A replica killed with SIGKILL under load costs no stateless request (HAProxy
  retries on another replica); the sequences it held are lost, their next request
  gets Nereid's (Triton's) "must specify the START flag" error from the replica the
  hash now picks, and a client that restarts the sequence with START goes on.
- A fourth replica joins through HAProxy's runtime API while the others serve.

Needs Debian's `haproxy` and `redis-server` packages; the file is skipped without them.
"""

import shutil
import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import EXAMPLE_MODELS, add_sub_config, add_sub_inputs, expect_error, wait_for

_MISSING = [name for name in ("haproxy", "redis-server") if shutil.which(name) is None]
if _MISSING:
    pytest.skip(
        f"scale-out tests need {' and '.join(_MISSING)} (apt-get install haproxy redis-server)",
        allow_module_level=True,
    )

from haproxy_fixture import HAProxy  # noqa: E402
from test_response_cache import Redis, free_port  # noqa: E402

F32 = np.float32
B = np.array([[0.5, -1.0, 10.0, 2.25]], F32)
SEQ_MODEL = "sequence_accumulate"
# Eight sequence slots per replica (the example has four), so that however the hash
# spreads a test's sequences none waits in a backlog behind the test's own loop; and a
# minute before an idle sequence is released, so none is while a test runs its load.
SEQ_CONFIG = (
    open(f"{EXAMPLE_MODELS}/{SEQ_MODEL}/config.pbtxt").read()
    .replace("max_batch_size: 4", "max_batch_size: 8")
    .replace("max_sequence_idle_microseconds: 5000000", "max_sequence_idle_microseconds: 60000000")
)
MODELS = {
    "add_sub_cache": add_sub_config(name="add_sub_cache", extra="response_cache { enable: true }\n"),
    SEQ_MODEL: SEQ_CONFIG,
}
NOT_STARTED = (
    "inference request for sequence {seq} to model '" + SEQ_MODEL + "' must specify the START flag "
    "on the first request of the sequence"
)


class Cluster:
    """Replicas (conftest Servers, `replicas[i]` is HAProxy's server nereid{i+1}), their
    model repository, the shared Redis and the proxy in front."""

    def __init__(self, replicas, repo, redis, proxy):
        self.replicas = replicas
        self.repo = repo
        self.redis = redis
        self.proxy = proxy

    def http(self):
        return httpclient.InferenceServerClient(self.proxy.http_url, network_timeout=30.0)

    def grpc(self):
        return grpcclient.InferenceServerClient(self.proxy.grpc_url)


def start_replicas(start_server, repo, redis, count):
    """`count` replicas started at once; returned when all have connected to Redis."""
    servers = [start_server(repo, *redis.flags(), wait=False) for _ in range(count)]
    for srv in servers:
        srv.wait_started()
        wait_for(lambda: "redis cache connected" in srv.log(), what="the replica's redis connection")
    return servers


@pytest.fixture
def cluster(tmp_path, make_repo, start_server):
    redis = Redis()
    proxy = None
    try:
        repo = make_repo(["add_sub", SEQ_MODEL], MODELS)
        replicas = start_replicas(start_server, repo, redis, 3)
        ports = [(srv.bound["http"][1], srv.bound["grpc"][1]) for srv in replicas]
        proxy = HAProxy(tmp_path, free_port(), free_port(), ports)
        for i in range(1, 4):
            proxy.wait_servers(f"nereid{i}", "UP")
        yield Cluster(replicas, repo, redis, proxy)
    finally:
        if proxy is not None:
            proxy.stop()
        redis.stop()


def stats(srv, model):
    s = srv.http_client().get_inference_statistics(model)["model_stats"][0]
    i = s["inference_stats"]
    return {"success": i["success"]["count"], "hit": i["cache_hit"]["count"], "exec": s["execution_count"]}


def successes(replicas, model):
    return [stats(srv, model)["success"] for srv in replicas]


def module_of(client):
    return httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient


def add_sub(client, a, model="add_sub", headers=None):
    result = client.infer(model, add_sub_inputs(module_of(client), a, B), headers=headers)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - B)


def seq_input(mod, value):
    inp = mod.InferInput("INPUT", [1, 1], "FP32")
    inp.set_data_from_numpy(np.array([[value]], F32))
    return [inp]


def seq_step(client, seq, value, start=False, end=False):
    """One unary request of sequence `seq`, with the header the proxy hashes; the sum."""
    result = client.infer(
        SEQ_MODEL,
        seq_input(module_of(client), value),
        sequence_id=seq,
        sequence_start=start,
        sequence_end=end,
        headers={"x-sequence-id": str(seq)},
    )
    return float(result.as_numpy("OUTPUT")[0, 0])


class Load:
    """Client threads sending distinct add_sub requests through the proxy (half HTTP,
    half gRPC unary) and checking every answer, until stop()."""

    def __init__(self, cluster, threads=4):
        self.cluster = cluster
        self.ok = 0
        self.failures = []
        self._lock = threading.Lock()  # guards ok and failures against the workers
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]
        for t in self._threads:
            t.start()

    def _run(self, index):
        client = self.cluster.http() if index % 2 == 0 else self.cluster.grpc()
        n = 0
        try:
            while not self._stop.is_set():
                n += 1
                try:
                    add_sub(client, np.full((1, 4), index * 1e6 + n, F32))
                except Exception as e:  # noqa: BLE001 - every failure is counted and shown
                    with self._lock:
                        self.failures.append(f"thread {index} request {n}: {type(e).__name__}: {e}")
                else:
                    with self._lock:
                        self.ok += 1
        finally:
            client.close()

    def count(self):
        with self._lock:
            return self.ok

    def wait_more(self, n, what):
        target = self.count() + n
        wait_for(lambda: self.count() >= target, timeout=20, what=what)

    def stop(self):
        self._stop.set()
        for t in self._threads:
            t.join(30)
        return self.failures


# --- a. the response cache is shared ---------------------------------------------------------


def test_cached_response_is_a_hit_on_every_replica(cluster):
    a, b, c = cluster.replicas
    x = np.array([[1.0, 2.0, 3.0, 4.0]], F32)
    add_sub(a.http_client(), x, "add_sub_cache")
    assert stats(a, "add_sub_cache") == {"success": 1, "hit": 0, "exec": 1}
    # The same request straight to the two other replicas: answered from Redis.
    add_sub(b.grpc_client(), x, "add_sub_cache")
    add_sub(c.http_client(), x, "add_sub_cache")
    for srv in (b, c):
        assert stats(srv, "add_sub_cache") == {"success": 1, "hit": 1, "exec": 0}
    # Through the proxy, whichever replica answers: hits, and the model never runs again.
    http, grpc = cluster.http(), cluster.grpc()
    for _ in range(3):
        add_sub(http, x, "add_sub_cache")
        add_sub(grpc, x, "add_sub_cache")
    totals = [stats(srv, "add_sub_cache") for srv in cluster.replicas]
    assert sum(t["hit"] for t in totals) == 2 + 6
    assert sum(t["exec"] for t in totals) == 1


# --- b. sequences stay on one replica ---------------------------------------------------------


def test_one_grpc_stream_per_sequence(cluster):
    seqs = list(range(101, 107))
    clients, answers = {}, {}
    for seq in seqs:
        answers[seq] = []
        clients[seq] = cluster.grpc()
        clients[seq].start_stream(callback=lambda result, error, seq=seq: answers[seq].append((result, error)))
    try:
        expected = {seq: 0.0 for seq in seqs}
        for step in range(4):
            # Step `step` of every sequence, interleaved, each on its own stream.
            for seq in seqs:
                value = float(seq * 10 + step)
                expected[seq] += value
                clients[seq].async_stream_infer(
                    SEQ_MODEL, seq_input(grpcclient, value), sequence_id=seq,
                    sequence_start=step == 0, sequence_end=step == 3,
                )
            wait_for(lambda: all(len(answers[s]) == step + 1 for s in seqs), what=f"step {step} answers")
            for seq in seqs:
                result, error = answers[seq][step]
                assert error is None, (seq, error)
                assert float(result.as_numpy("OUTPUT")[0, 0]) == expected[seq]
                assert int(result.as_numpy("CORRID_OUT")[0, 0]) == seq
    finally:
        for client in clients.values():
            client.stop_stream()
            client.close()
    served = successes(cluster.replicas, SEQ_MODEL)
    assert sum(served) == 6 * 4
    assert all(n % 4 == 0 for n in served), served  # whole sequences only
    assert sum(1 for n in served if n) >= 2, served  # and not all on one replica


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_unary_sequences_follow_the_hashed_header(cluster, proto):
    client = cluster.http() if proto == "http" else cluster.grpc()
    seqs = list(range(201, 209))
    expected = {seq: 0.0 for seq in seqs}
    for step in range(4):
        for seq in seqs:
            value = float(seq + step)
            expected[seq] += value
            assert seq_step(client, seq, value, start=step == 0, end=step == 3) == expected[seq]
    served = successes(cluster.replicas, SEQ_MODEL)
    assert sum(served) == 8 * 4
    assert all(n % 4 == 0 for n in served), served
    assert sum(1 for n in served if n) >= 2, served


# --- c. a replica dies -------------------------------------------------------------------------


def owners(cluster, client, seqs):
    """Start each sequence through the proxy (value 1) and see which replica took it."""
    owner = {}
    for seq in seqs:
        before = successes(cluster.replicas, SEQ_MODEL)
        assert seq_step(client, seq, 1.0, start=True) == 1.0
        after = successes(cluster.replicas, SEQ_MODEL)
        (owner[seq],) = [i for i in range(len(before)) if after[i] == before[i] + 1]
    return owner


def test_killed_replica_loses_no_stateless_request(cluster):
    http = cluster.http()
    seqs = list(range(301, 309))
    owner = owners(cluster, http, seqs)
    victim = owner[seqs[0]]
    assert len(set(owner.values())) >= 2, owner

    load = Load(cluster)
    try:
        load.wait_more(40, "requests before the kill")
        cluster.replicas[victim].kill()  # SIGKILL, in the middle of the load
        cluster.proxy.wait_servers(f"nereid{victim + 1}", "DOWN")
        load.wait_more(40, "requests after the kill")
    finally:
        failures = load.stop()
    assert failures == [], failures[:5]
    assert load.ok >= 80

    # The victim's sequences are gone: the replica the hash now picks has never seen
    # them. The others' sequences did not move and go on.
    grpc = cluster.grpc()
    for seq in seqs:
        client = http if seq % 2 else grpc
        if owner[seq] == victim:
            e = expect_error(seq_step, client, seq, 2.0)
            assert e.message() == NOT_STARTED.format(seq=seq)
            # Restarting the sequence with START is all a client has to do.
            assert seq_step(client, seq, 5.0, start=True) == 5.0
            assert seq_step(client, seq, 2.0, end=True) == 7.0
        else:
            assert seq_step(client, seq, 2.0, end=True) == 3.0


# --- d. a replica joins ---------------------------------------------------------------------------


def test_new_replica_joins_through_the_runtime_api(cluster, start_server, poll):
    load = Load(cluster)
    try:
        load.wait_more(20, "requests before the join")
        (new,) = start_replicas(start_server, cluster.repo, cluster.redis, 1)
        cluster.proxy.add_replica("nereid4", new.bound["http"][1], new.bound["grpc"][1])
        # The load now reaches the new replica, and still the others.
        before = successes(cluster.replicas, "add_sub")
        poll(lambda: stats(new, "add_sub")["success"] >= 10, what="requests on the new replica")
        after = successes(cluster.replicas, "add_sub")
        assert all(a > b for a, b in zip(after, before)), (before, after)
    finally:
        failures = load.stop()
    assert failures == [], failures[:5]

    # Both frontends route to it.
    for client in (cluster.http(), cluster.grpc()):

        def reaches_new(client=client, start=stats(new, "add_sub")["success"]):
            add_sub(client, np.full((1, 4), 7e6, F32))
            return stats(new, "add_sub")["success"] > start

        try:
            poll(reaches_new, what=f"a request through {module_of(client).__name__} on the new replica")
        finally:
            client.close()
