"""The container image, run with podman and driven by NVIDIA's `tritonclient`.

The image is started the two ways Triton's image is: with its own CMD
(`tritonserver --model-repository=/models`) and with the arguments KServe's
tritonserver runtime gives it (models at /mnt/models, HTTP on 8080, gRPC on
9000). Each time examples/models is mounted read-only, the container ports are
published on ephemeral ports of 127.0.0.1, and add_sub answers over HTTP and
gRPC.

Running
-------
    scripts/test_image.sh                       # installs podman, builds the image, runs this
    .venv/bin/python -m pytest -rs tests/image  # as root, with podman installed

The image is `$NEREID_IMAGE` (default localhost/nereid:latest). When it does
not exist it is built by deploy/image/build-offline.sh from `$NEREID_BIN`
(default target/release/nereid). Every test skips, saying why, where podman is
missing or cannot start a container here.
"""

import os
import shutil
import subprocess
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import yaml

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE_MODELS = os.path.join(REPO_ROOT, "examples", "models")
IMAGE = os.environ.get("NEREID_IMAGE", "localhost/nereid:latest")
READY_TIMEOUT_S = 30

# The container arguments of deploy/kserve's runtime, which tests/python/test_deploy.py
# holds equal to KServe's own kserve-tritonserver runtime.
with open(os.path.join(REPO_ROOT, "deploy", "kserve", "cluster-serving-runtime.yaml")) as _f:
    KSERVE_ARGS = yaml.safe_load(_f)["spec"]["containers"][0]["args"]

# The securityContext deploy/kserve's runtime gives the container: runAsUser 1000,
# allowPrivilegeEscalation false, every capability dropped.
KSERVE_SECURITY = ["--user=1000", "--security-opt=no-new-privileges", "--cap-drop=ALL"]

# `podman run` options tried in turn until a container starts. The first set is
# podman's defaults. The second is for hosts like a Firecracker VM with cgroup v1
# controllers beside a cgroup v2 hierarchy, which crun refuses ("cgroups in hybrid
# mode not supported") and runc accepts, and whose root lacks CAP_SYS_RESOURCE, so
# the runtime cannot raise the open-file and process limits to podman's defaults;
# limits below the hard ones can be set.
RUN_OPTION_SETS = [
    [],
    ["--runtime=runc", "--ulimit=nofile=16384:16384", "--ulimit=nproc=4096:4096"],
]

# The first test may build the image (a Debian bootstrap, a minute or two).
pytestmark = pytest.mark.timeout(600)


def podman(*args, check=True):
    result = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        pytest.fail(f"podman {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result


@pytest.fixture(scope="session")
def run_options():
    """The `podman run` options that start a container of IMAGE on this host."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed: apt-get install podman, or run scripts/test_image.sh")
    if podman("image", "exists", IMAGE, check=False).returncode != 0:
        default_binary = os.path.join(REPO_ROOT, "target", "release", "nereid")
        binary = os.environ.get("NEREID_BIN", default_binary)
        script = os.path.join(REPO_ROOT, "deploy", "image", "build-offline.sh")
        subprocess.run([script, "--tag", IMAGE, binary], check=True)
    errors = []
    for options in RUN_OPTION_SETS:
        probe = ["run", "--rm", "--health-interval=disable", *options, IMAGE, "true"]
        result = podman(*probe, check=False)
        if result.returncode == 0:
            return options
        errors.append(f"  podman run {' '.join(options)}: {result.stderr.strip()}")
    pytest.skip(
        "podman cannot start a container on this host; run scripts/test_image.sh as root "
        "on a machine where `podman run` works (a VM or bare metal, or a --privileged "
        "container). What each attempt answered:\n" + "\n".join(errors)
    )


class Container:
    """One detached container of IMAGE and the host addresses of its ports."""

    def __init__(self, options, models, ports, command):
        # The image's HEALTHCHECK runs on demand (`check_health`): podman's periodic
        # runs need systemd timers, which a container host need not have.
        argv = ["run", "--detach", *options, "--health-interval=disable"]
        argv += ["--volume", f"{EXAMPLE_MODELS}:{models}:ro"]
        argv += [f"--publish=127.0.0.1::{port}" for port in ports]
        self.id = podman(*argv, IMAGE, *command).stdout.strip()

    def address(self, port):
        # `podman port` prints e.g. 127.0.0.1:40195
        return podman("port", self.id, f"{port}/tcp").stdout.strip()

    def logs(self):
        result = podman("logs", self.id, check=False)
        return result.stdout + result.stderr

    def wait_ready(self, http_port):
        client = httpclient.InferenceServerClient(self.address(http_port))
        try:
            self._poll_ready(client)
        finally:
            client.close()

    def _poll_ready(self, client):
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if client.is_server_ready():
                    return
            except Exception:  # not accepting connections yet
                pass
            state = podman("inspect", "--format", "{{.State.Status}}", self.id).stdout.strip()
            if state != "running":
                pytest.fail(f"container stopped ({state}) before it was ready:\n{self.logs()}")
            time.sleep(0.2)
        pytest.fail(f"container not ready within {READY_TIMEOUT_S}s:\n{self.logs()}")

    def server_uid(self):
        """The uid the server (the container's PID 1) runs as."""
        return podman("exec", self.id, "stat", "--format=%u", "/proc/1").stdout.strip()

    def check_health(self):
        return podman("healthcheck", "run", self.id, check=False)

    def remove(self):
        podman("rm", "--force", self.id, check=False)


@pytest.fixture
def start_container(run_options):
    """start_container(models, ports, command=(), options=()) -> a ready Container.

    models: where examples/models is mounted; ports: container ports to publish,
    the HTTP one first; command: replaces the image's CMD when given; options:
    more `podman run` options.
    """
    started = []

    def start(models, ports, command=(), options=()):
        container = Container([*run_options, *options], models, ports, command)
        started.append(container)
        container.wait_ready(ports[0])
        return container

    yield start
    for container in started:
        container.remove()


def check_add_sub(client_module, url):
    a = np.array([[1, 2, 3, 4]], dtype=np.float32)
    b = np.array([[10, 20, 30, 40]], dtype=np.float32)
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        tensor = client_module.InferInput(name, list(value.shape), "FP32")
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    client = client_module.InferenceServerClient(url)
    try:
        result = client.infer("add_sub", inputs)
    finally:
        client.close()
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_image_cmd_serves_models_as_uid_1000(start_container):
    container = start_container("/models", [8000, 8001, 8002])
    check_add_sub(httpclient, container.address(8000))
    check_add_sub(grpcclient, container.address(8001))
    metrics = urllib.request.urlopen(f"http://{container.address(8002)}/metrics").read().decode()
    assert 'nv_inference_count{model="add_sub"' in metrics
    assert container.server_uid() == "1000"
    health = container.check_health()
    assert health.returncode == 0, f"HEALTHCHECK failed: {health.stdout}{health.stderr}"


def test_kserve_tritonserver_args(start_container):
    container = start_container("/mnt/models", [8080, 9000], KSERVE_ARGS, KSERVE_SECURITY)
    check_add_sub(httpclient, container.address(8080))
    check_add_sub(grpcclient, container.address(9000))
    assert container.server_uid() == "1000"
