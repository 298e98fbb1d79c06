"""Real tritonserver launch lines start Nereid unchanged.

Each line below is the shape of one found in public deployments (a Helm chart, a KServe
runtime, NVIDIA's perf tutorials, a slurm job), with only the repository, the ports (0)
and the addresses (loopback) changed. Nereid must start, serve, say once which flags
change nothing here, and honour those that do (`--allow-cpu-metrics=false`,
`--model-control-mode=POLL`, `--log-verbose=true`). SageMaker, Vertex AI and gRPC TLS
lines have tests of their own.
"""

import socket

import numpy as np
import pytest
import tritonclient.http as httpclient

LOOPBACK = ["--http-port=0", "--grpc-port=0", "--metrics-port=0",
            "--http-address=127.0.0.1", "--grpc-address=127.0.0.1"]

LAUNCH_LINES = {
    # Helm chart values.yaml args (GPU cluster defaults).
    "helm": ["--strict-model-config=false", "--log-verbose=1", "--allow-gpu-metrics=false",
             "--pinned-memory-pool-byte-size=268435456", "--cuda-memory-pool-byte-size=0:67108864",
             "--exit-on-error=false"],
    # KServe / ModelMesh runtime container args.
    "kserve": ["--allow-grpc=true", "--allow-http=true", "--grpc-infer-allocation-pool-size=16",
               "--model-control-mode=POLL", "--repository-poll-secs=30", "--log-verbose=true",
               "--grpc-max-response-pool-size=64"],
    # perf tutorial / slurm job tuning flags.
    "tuned": ["--http-thread-count=16", "--grpc-infer-thread-count=4", "--model-load-thread-count=2",
              "--buffer-manager-thread-count=4", "--min-supported-compute-capability=6.0",
              "--enable-peer-access=false", "--host-policy=gpu_0,numa-node=0",
              "--model-load-gpu-limit=0:0.8", "--rate-limit=execution_count",
              "--rate-limit-resource=R1:10", "--allow-cpu-metrics=false", "--log-format=default",
              "--cuda-virtual-address-size=0:1073741824", "--grpc-keepalive-time=10000"],
}

NO_EFFECT = {
    "helm": [],
    "kserve": ["--grpc-infer-allocation-pool-size"],
    "tuned": ["--buffer-manager-thread-count", "--min-supported-compute-capability",
              "--enable-peer-access", "--host-policy", "--model-load-gpu-limit",
              "--cuda-virtual-address-size"],
}


@pytest.mark.parametrize("name", sorted(LAUNCH_LINES))
def test_launch_line_starts_and_serves(make_repo, start_server, name):
    repo = make_repo(["add_sub"])
    server = start_server(repo, raw_args=[f"--model-repository={repo}", *LOOPBACK, *LAUNCH_LINES[name]])
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        a = np.arange(4, dtype=np.float32).reshape(1, 4)
        inputs = [httpclient.InferInput("INPUT0", [1, 4], "FP32"), httpclient.InferInput("INPUT1", [1, 4], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        result = client.infer("add_sub", inputs)
        assert (result.as_numpy("OUTPUT0") == a + a).all()
    finally:
        client.close()
    log = server.log()
    for flag in NO_EFFECT[name]:
        assert flag in log, f"{flag} not reported:\n{log}"
    # The metrics port follows --http-address when --metrics-address is not given.
    assert server.bound["metrics"][0] == "127.0.0.1"
    metrics = server.metrics()
    if "--allow-cpu-metrics=false" in LAUNCH_LINES[name]:
        assert "nv_cpu_utilization" not in metrics
    else:
        assert "nv_cpu_utilization" in metrics


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_reuse_http_port_lets_two_servers_share_it(make_repo, start_server):
    repo = make_repo(["add_sub"])
    port = free_port()
    args = [f"--model-repository={repo}", f"--http-port={port}", "--grpc-port=0", "--metrics-port=0",
            "--http-address=127.0.0.1", "--grpc-address=127.0.0.1"]
    first = start_server(repo, raw_args=[*args, "--reuse-http-port=true"])
    second = start_server(repo, raw_args=[*args, "--reuse-http-port=true"])
    assert first.bound["http"][1] == second.bound["http"][1] == port
    third = start_server(repo, raw_args=args, wait=False)
    assert third.wait_exit(15) == 1
    # Once, as a log line (L0_lifecycle counts it).
    assert third.log().count(f"failed to start HTTP service: Unavailable - Socket '127.0.0.1:{port}' already in use") == 1


def test_vertex_ai_storage_uri_serves_without_model_repository(make_repo, start_server):
    repo = make_repo(["add_sub"])
    server = start_server(repo, raw_args=LOOPBACK, env={"AIP_STORAGE_URI": repo})
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        assert client.is_model_ready("add_sub")
    finally:
        client.close()


def test_no_repository_at_all_is_tritons_error(start_server, tmp_path):
    server = start_server(str(tmp_path), raw_args=LOOPBACK, wait=False)
    assert server.wait_exit(15) == 1
    assert "--model-repository must be specified" in server.log()
