"""The Kubernetes and KServe manifests in deploy/: valid against the schemas, and the
arguments they give the container are ones the real binary accepts and serves with.

Schemas: Kubernetes' own (the `kubernetes-validate` package bundles the OpenAPI schemas
of each release; strict, so an unknown field fails). KServe's ServingRuntime is a custom
resource those schemas do not know, so its spec is checked against the fields of KServe's
CRD (config/crd/full/serving.kserve.io_clusterservingruntimes.yaml, v1alpha1) and its
containers as a Pod's containers.
"""

import glob
import os
import re
import socket

import kubernetes_validate
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import yaml

from conftest import REPO_ROOT

DEPLOY = os.path.join(REPO_ROOT, "deploy")
KUBERNETES_VERSION = kubernetes_validate.latest_version()

# KServe's own runtime for Triton (config/runtimes/kserve-tritonserver.yaml): the
# container arguments KServe starts tritonserver with.
KSERVE_TRITON_ARGS = [
    "tritonserver",
    "--model-store=/mnt/models",
    "--grpc-port=9000",
    "--http-port=8080",
    "--allow-grpc=true",
    "--allow-http=true",
]

# The v1alpha1 ServingRuntimeSpec of KServe's CRD: its fields, and those of a supported
# model format. Protocol names are KServe's constants (pkg/constants).
SERVING_RUNTIME_SPEC_FIELDS = {
    "affinity", "annotations", "builtInAdapter", "containers", "disabled", "grpcDataEndpoint",
    "grpcEndpoint", "hostIPC", "httpDataEndpoint", "imagePullSecrets", "labels", "multiModel",
    "nodeSelector", "protocolVersions", "replicas", "resourceClaims", "schedulerName",
    "storageHelper", "supportedModelFormats", "tolerations", "volumes", "workerSpec",
}
MODEL_FORMAT_FIELDS = {"name": str, "version": str, "autoSelect": bool, "priority": int}
PROTOCOLS = {"v1", "v2", "grpc-v1", "grpc-v2"}


def documents(pattern):
    """(file name, document) for every YAML document of the matching files."""
    found = []
    for path in sorted(glob.glob(os.path.join(DEPLOY, pattern))):
        with open(path) as f:
            found += [(os.path.basename(path), doc) for doc in yaml.safe_load_all(f) if doc]
    assert found, f"no manifests match deploy/{pattern}"
    return found


def of_kind(kind, pattern="kubernetes/*.yaml"):
    return [doc for _, doc in documents(pattern) if doc["kind"] == kind]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("name,doc", documents("kubernetes/*.yaml"), ids=lambda v: v if isinstance(v, str) else "")
def test_kubernetes_manifest_is_valid(name, doc):
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_kserve_runtime_matches_the_crd_and_tritons_runtime():
    [runtime] = of_kind("ClusterServingRuntime", "kserve/*.yaml")
    assert runtime["apiVersion"] == "serving.kserve.io/v1alpha1"
    spec = runtime["spec"]
    assert set(spec) <= SERVING_RUNTIME_SPEC_FIELDS, set(spec) - SERVING_RUNTIME_SPEC_FIELDS
    assert set(spec["protocolVersions"]) == {"v2", "grpc-v2"} <= PROTOCOLS
    formats = spec["supportedModelFormats"]
    for fmt in formats:
        assert "name" in fmt and set(fmt) <= set(MODEL_FORMAT_FIELDS), fmt
        for key, value in fmt.items():
            assert isinstance(value, MODEL_FORMAT_FIELDS[key]), (fmt, key)
        assert fmt.get("priority", 1) >= 1
    # The formats of KServe's Triton runtime, each at its version.
    assert {(f["name"], f["version"]) for f in formats} == {
        ("tensorrt", "8"), ("tensorflow", "1"), ("tensorflow", "2"), ("onnx", "1"),
        ("pytorch", "1"), ("triton", "2"),
    }
    [container] = spec["containers"]
    assert container["args"] == KSERVE_TRITON_ARGS
    # The containers are core/v1 Containers: check them inside a Pod.
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "runtime"},
           "spec": {"containers": spec["containers"]}}
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


def test_inference_service_names_the_runtime():
    [isvc] = of_kind("InferenceService", "kserve/*.yaml")
    [runtime] = of_kind("ClusterServingRuntime", "kserve/*.yaml")
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["modelFormat"]["name"] in {f["name"] for f in runtime["spec"]["supportedModelFormats"]}


def container_argv(args, repo, mount, ports):
    """A manifest's container args as a local argv: the image's `tritonserver` is the
    binary, the mounted repository is `repo`, and fixed ports are free ones here."""
    assert args[0] == "tritonserver", args
    argv = []
    for arg in args[1:]:
        arg = arg.replace(mount, repo)
        flag = arg.split("=", 1)[0]
        if flag in ports:
            arg = f"{flag}={ports[flag]}"
        argv.append(arg)
    return argv


def test_binary_serves_with_kserves_arguments(make_repo, start_server, add_sub_io):
    # Exactly what KServe passes (ports moved to free ones, the repository to a local
    # directory); the metrics port is left to its default in KServe, moved here too.
    repo = make_repo(["add_sub"])
    ports = {"--http-port": free_port(), "--grpc-port": free_port()}
    argv = container_argv(KSERVE_TRITON_ARGS, repo, "/mnt/models", ports)
    server = start_server(repo, raw_args=argv + ["--metrics-port=0"])
    assert server.bound["http"][1] == ports["--http-port"]
    assert server.bound["grpc"][1] == ports["--grpc-port"]
    for module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
        client = module.InferenceServerClient(url)
        a = np.array([[1, 2, 3, 4]], dtype=np.float32)
        result = client.infer("add_sub", add_sub_io(module, a, np.ones_like(a)))
        assert (result.as_numpy("OUTPUT0") == a + 1).all()
        client.close()


def test_deployment_arguments_and_probes_work(make_repo, start_server):
    [deployment] = of_kind("Deployment", "kubernetes/deployment.yaml")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    repo = make_repo(["add_sub"])
    # The Redis service name does not resolve here: the server must still come up and
    # serve (uncached) while its cache is unreachable, as it would before Redis is.
    argv = container_argv(container["args"], repo, "/models", {})
    server = start_server(repo, raw_args=argv + [
        "--http-port=0", "--grpc-port=0", "--metrics-port=0",
        "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
    ])
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        path = container[probe]["httpGet"]["path"]
        assert server.request("GET", path).status == 200, probe
    scrape = deployment["spec"]["template"]["metadata"]["annotations"]
    assert server.request("GET", scrape["prometheus.io/path"], port="metrics").status == 200
    # Termination: the grace period covers the preStop pause and the drain.
    exit_timeout = next(int(a.split("=")[1]) for a in container["args"] if a.startswith("--exit-timeout-secs="))
    pause = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    assert pod["terminationGracePeriodSeconds"] > exit_timeout + pause


def test_autoscaler_metric_comes_from_the_adapter_rule(server):
    [hpa] = of_kind("HorizontalPodAutoscaler")
    [rules] = of_kind("ConfigMap")
    [rule] = yaml.safe_load(rules["data"]["config.yaml"])["rules"]
    [metric] = hpa["spec"]["metrics"]
    assert metric["pods"]["metric"]["name"] == rule["name"]["as"]
    # The series the rule reads are families Nereid exports.
    families = set(re.findall(r"\b(nv_[a-z_]+)\{", rule["seriesQuery"] + rule["metricsQuery"]))
    assert families == {"nv_inference_queue_duration_us", "nv_inference_request_success"}
    exported = set(re.findall(r"^# TYPE (\S+)", server.metrics(), re.M))
    assert families <= exported, families - exported
