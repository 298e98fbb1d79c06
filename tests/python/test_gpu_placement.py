"""Where instances go on a machine with GPUs, as Triton places them, with the CUDA driver
test double (fake_cuda/fake_cuda.c, FAKE_CUDA_DEVICES GPUs) standing in for the driver:
`KIND_GPU` makes `count` instances on each listed GPU (every GPU when it lists none), a
group without a kind goes to the GPUs for a hosted backend and stays on the CPU for
Nereid's own CPU-only backends, and what cannot be placed fails the load in Triton's
words. The hosted C test backend (mode "placed") logs each instance's name, kind and
device id as TRITONBACKEND_ModelInstanceKind/DeviceId report them.
"""

import re
import shutil

from conftest import EXAMPLE_MODELS, Server, base_args
from test_hosted_backend import build, model

KIND_CPU, KIND_GPU = 1, 2
IO = """
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]"""


def start(tmp_path, fake_cuda, gpus, models, extra_args=()):
    """A server whose CUDA driver shows `gpus` GPUs, over `models`: (name, extra config)
    for the placing test backend, or (name, None) for the ONNX add_sub example."""
    backends = tmp_path / "backends"
    build(backends, "nereid_test")
    root = tmp_path / "models"
    for name, extra in models:
        if extra is None:
            shutil.copytree(f"{EXAMPLE_MODELS}/add_sub", root / name)
            config = (root / name / "config.pbtxt").read_text().replace('name: "add_sub"', f'name: "{name}"')
            (root / name / "config.pbtxt").write_text(config)
        else:
            model(root, name, "placed", io=IO, extra=extra)
    args = ["--backend-directory", str(backends), "--exit-on-error=false",
            "--model-control-mode=explicit", "--load-model=*", *extra_args]
    server = Server(str(root), base_args(str(root), args),
                    env={"NEREID_CUDA_LIBRARY": fake_cuda, "FAKE_CUDA_DEVICES": str(gpus)})
    server.wait_started(timeout=60)
    return server


def placements(server, model_name):
    """(instance name, kind, device id) of each instance of `model_name` the backend logged."""
    found = re.findall(rf"placed ({model_name}_\w+) kind (\d) device (\d+)", server.log())
    return sorted((name, int(kind), int(device)) for name, kind, device in found)


def index_state(server, name):
    index = server.request("POST", "/v2/repository/index").json()
    return next((m.get("state"), m.get("reason", "")) for m in index if m["name"] == name)


def test_gpu_groups_make_count_instances_on_each_gpu(tmp_path, fake_cuda):
    server = start(tmp_path, fake_cuda, 2, [
        ("every", "instance_group [ { kind: KIND_GPU count: 2 } ]"),
        ("second", "instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]"),
        ("auto", ""),
        ("cpu", "instance_group [ { kind: KIND_CPU count: 2 } ]"),
        ("add_sub", None),
    ])
    try:
        # Group `<model>_<index>`, instances `<group>_<count index>` on each GPU (Triton's names).
        assert placements(server, "every") == [
            ("every_0_0", KIND_GPU, 0), ("every_0_0", KIND_GPU, 1),
            ("every_0_1", KIND_GPU, 0), ("every_0_1", KIND_GPU, 1)]
        assert placements(server, "second") == [("second_0_0", KIND_GPU, 1)]
        # Without a group, one named after the model, on every GPU.
        assert placements(server, "auto") == [("auto_0", KIND_GPU, 0), ("auto_0", KIND_GPU, 1)]
        assert placements(server, "cpu") == [("cpu_0_0", KIND_CPU, 0), ("cpu_0_1", KIND_CPU, 0)]
        # The model initializes (and may auto-complete) with its groups already placed.
        groups = re.search(r"placed model auto groups (.*)", server.log()).group(1).replace('\\"', '"')
        for field in ('"name":"auto"', '"kind":"KIND_GPU"', '"gpus":[0,1]', '"count":1'):
            assert field in groups, groups
        config = server.request("GET", "/v2/models/every/config").json()
        assert config["instance_group"][0]["kind"] == "KIND_GPU"
        assert config["instance_group"][0]["gpus"] == [0, 1]
        # Nereid's ONNX Runtime runs on the CPU: a group without a kind stays there.
        config = server.request("GET", "/v2/models/add_sub/config").json()
        assert config["instance_group"][0]["kind"] == "KIND_CPU"
        assert index_state(server, "add_sub")[0] == "READY"
    finally:
        server.kill()


def test_what_cannot_be_placed_fails_the_load_in_tritons_words(tmp_path, fake_cuda):
    onnx_on_gpu = 'instance_group [ { kind: KIND_GPU } ]\n'
    server = start(tmp_path, fake_cuda, 1, [
        ("missing_gpu", "instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]"),
        ("onnx_gpu", None),
    ])
    try:
        state, reason = index_state(server, "missing_gpu")
        assert state == "UNAVAILABLE"
        assert "instance group missing_gpu_0 of model missing_gpu specifies invalid or unsupported gpu id 1" in reason
        assert reason.endswith("are: 0"), reason
        # The ONNX model loaded on the CPU; asked onto the GPU it fails with why.
        config = (tmp_path / "models" / "onnx_gpu" / "config.pbtxt")
        config.write_text(config.read_text() + onnx_on_gpu)
        answer = server.request("POST", "/v2/repository/models/onnx_gpu/load")
        assert answer.status == 400
        assert "runs on the CPU only" in answer.json()["error"], answer.json()
    finally:
        server.kill()


def test_without_gpus_a_gpu_group_runs_on_the_cpu_when_asked(tmp_path, fake_cuda):
    server = start(tmp_path, fake_cuda, 0, [("wants_gpu", "instance_group [ { kind: KIND_GPU count: 2 } ]")],
                   ["--gpu-instances-on-cpu"])
    try:
        assert index_state(server, "wants_gpu")[0] == "READY"
        assert placements(server, "wants_gpu") == [("wants_gpu_0_0", KIND_CPU, 0), ("wants_gpu_0_1", KIND_CPU, 0)]
        assert "has kind KIND_GPU and there is no GPU: its instances run on the CPU" in server.log()
    finally:
        server.kill()


def test_without_gpus_a_gpu_group_fails_as_tritons_cpu_build_does(tmp_path, fake_cuda):
    server = start(tmp_path, fake_cuda, 0, [("wants_gpu", "instance_group [ { kind: KIND_GPU } ]"), ("auto", "")])
    try:
        state, reason = index_state(server, "wants_gpu")
        assert state == "UNAVAILABLE"
        assert "has kind KIND_GPU but no GPUs are available" in reason, reason
        assert placements(server, "auto") == [("auto_0", KIND_CPU, 0)]
    finally:
        server.kill()


def test_a_backends_preferred_groups_shape_the_groups_as_in_triton(tmp_path, fake_cuda):
    # The backend prefers 3 CPU instances (as OpenVINO's prefers the CPU).
    models = [
        ("plain", ""),
        ("gpu", "instance_group [ { kind: KIND_GPU } ]"),
        ("cpu", "instance_group [ { kind: KIND_CPU } ]"),
    ]
    server = start(tmp_path, fake_cuda, 2, models, ["--backend-config=nereid_test,preferred=1:3"])
    try:
        assert placements(server, "plain") == [(f"plain_{i}", KIND_CPU, 0) for i in range(3)]
        assert placements(server, "gpu") == [("gpu_0_0", KIND_GPU, 0), ("gpu_0_0", KIND_GPU, 1)]
        assert placements(server, "cpu") == [("cpu_0_0", KIND_CPU, 0), ("cpu_0_1", KIND_CPU, 0),
                                             ("cpu_0_2", KIND_CPU, 0)]
    finally:
        server.kill()


def test_a_gpu_preference_names_its_gpus_and_count(tmp_path, fake_cuda):
    # Two instances on GPU 1, else one CPU instance.
    models = [("plain", ""), ("gpu", "instance_group [ { kind: KIND_GPU } ]")]
    server = start(tmp_path, fake_cuda, 2, models, ["--backend-config=nereid_test,preferred=2:2:1;1:1"])
    try:
        assert placements(server, "plain") == [("plain_0", KIND_GPU, 1), ("plain_1", KIND_GPU, 1)]
        assert placements(server, "gpu") == [("gpu_0_0", KIND_GPU, 1), ("gpu_0_1", KIND_GPU, 1)]
        config = server.request("GET", "/v2/models/plain/config").json()
        assert (config["instance_group"][0]["gpus"], config["instance_group"][0]["count"]) == ([1], 2)
    finally:
        server.kill()
    # Without GPUs the GPU preference is passed over.
    server = start(tmp_path / "cpu", fake_cuda, 0, [("plain", "")], ["--backend-config=nereid_test,preferred=2:2:1;1:1"])
    try:
        assert placements(server, "plain") == [("plain_0", KIND_CPU, 0)]
    finally:
        server.kill()


def test_gpu_instances_count_in_their_gpus_metrics_series(tmp_path, fake_cuda):
    """As Triton's per-instance reporters: what a GPU instance executes is counted under
    its GPU's UUID, the model's own series (no gpu_uuid) counts the rest; the statistics
    API stays per model."""
    server = start(tmp_path, fake_cuda, 2, [
        ("every", "instance_group [ { kind: KIND_GPU } ]"),
        ("cpu", "instance_group [ { kind: KIND_CPU } ]"),
    ])
    body = {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [2], "data": [1, 2]}]}
    try:
        for name in ("every", "cpu"):
            for _ in range(3):
                answer = server.request("POST", f"/v2/models/{name}/infer", body)
                assert answer.status == 200, answer.json()
        metrics = server.metrics()
        uuids = ["GPU-00000000-0000-4000-8000-fa4ecda00000", "GPU-00000001-0000-4000-8000-fa4ecda00000"]
        for family in ("nv_inference_request_success", "nv_inference_count", "nv_inference_exec_count"):
            on_gpus = [float(re.search(rf'^{family}{{gpu_uuid="{u}",model="every",version="1"}} (\S+)$',
                                       metrics, re.M).group(1)) for u in uuids]
            assert sum(on_gpus) == 3, (family, on_gpus)
            assert re.search(rf'^{family}{{model="every",version="1"}} 0$', metrics, re.M), family
            assert re.search(rf'^{family}{{model="cpu",version="1"}} 3$', metrics, re.M), family
            assert f'{family}{{gpu_uuid="{uuids[0]}",model="cpu"' not in metrics
        assert re.search(r'^nv_inference_request_failure\{gpu_uuid="GPU-00000000-[^"]+",model="every",'
                         r'reason="BACKEND",version="1"\} 0$', metrics, re.M)
        stats = server.request("GET", "/v2/models/every/stats").json()
        assert stats["model_stats"][0]["inference_stats"]["success"]["count"] == 3
    finally:
        server.kill()
