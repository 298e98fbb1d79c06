"""Health, server/model metadata, model readiness and model configuration."""

import grpc
import pytest
from tritonclient.grpc import model_config_pb2

ADD_SUB_IO = {
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [-1, 4]},
    ],
    "outputs": [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 4]},
        {"name": "OUTPUT1", "datatype": "FP32", "shape": [-1, 4]},
    ],
}


def test_http_health_live_and_ready(server, http_client):
    assert http_client.is_server_live()
    assert http_client.is_server_ready()
    for path in ("/v2/health/live", "/v2/health/ready"):
        resp = server.request("GET", path)
        assert resp.status == 200, resp
        assert resp.body == b""


def test_grpc_health_live_and_ready(grpc_client):
    assert grpc_client.is_server_live()
    assert grpc_client.is_server_ready()


def test_grpc_standard_health_check(server):
    # grpc.health.v1.Health/Check, encoded by hand so no extra package is needed:
    # HealthCheckRequest{service=""} is the empty message; the reply
    # HealthCheckResponse{status=SERVING(1)} is field 1 varint 1 = b"\x08\x01".
    with grpc.insecure_channel(server.grpc_url) as channel:
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        assert check(b"", timeout=10) == b"\x08\x01"


def test_server_metadata(server, http_client, grpc_client):
    meta = http_client.get_server_metadata()
    # tritonserver's --id default: Triton's own client examples check it.
    assert meta["name"] == "triton"
    assert isinstance(meta["version"], str) and meta["version"]
    assert isinstance(meta["extensions"], list)
    assert all(isinstance(e, str) for e in meta["extensions"])
    # Extensions this suite exercises must be advertised.
    for ext in (
        "classification",
        "binary_tensor_data",
        "model_configuration",
        "model_repository",
        "statistics",
        "system_shared_memory",
        "cuda_shared_memory",
        "sequence",
    ):
        assert ext in meta["extensions"]
    assert server.request("GET", "/v2").json() == meta

    gmeta = grpc_client.get_server_metadata()
    assert gmeta.name == "triton"
    assert gmeta.version == meta["version"]
    assert list(gmeta.extensions) == meta["extensions"]


def test_model_metadata_add_sub(http_client, grpc_client):
    meta = http_client.get_model_metadata("add_sub")
    assert meta == {"name": "add_sub", "versions": ["1"], "platform": "onnxruntime_onnx", **ADD_SUB_IO}
    assert http_client.get_model_metadata("add_sub", "1") == meta

    gmeta = grpc_client.get_model_metadata("add_sub", as_json=True)
    # as_json is the client's protobuf-JSON rendering: int64 shapes become strings.
    assert gmeta["name"] == "add_sub"
    assert gmeta["versions"] == ["1"]
    assert gmeta["platform"] == "onnxruntime_onnx"
    assert [(t["name"], t["datatype"], t["shape"]) for t in gmeta["inputs"]] == [
        ("INPUT0", "FP32", ["-1", "4"]),
        ("INPUT1", "FP32", ["-1", "4"]),
    ]
    assert [(t["name"], t["datatype"], t["shape"]) for t in gmeta["outputs"]] == [
        ("OUTPUT0", "FP32", ["-1", "4"]),
        ("OUTPUT1", "FP32", ["-1", "4"]),
    ]


@pytest.mark.parametrize(
    "model,datatype",
    [("identity_string", "BYTES"), ("identity_bf16", "BF16"), ("identity_bool", "BOOL")],
)
def test_model_metadata_identity(http_client, grpc_client, model, datatype):
    meta = http_client.get_model_metadata(model)
    assert meta == {
        "name": model,
        "versions": ["1"],
        # backend: "onnxruntime" in config.pbtxt; Triton fills in the platform.
        "platform": "onnxruntime_onnx",
        "inputs": [{"name": "INPUT0", "datatype": datatype, "shape": [-1, -1]}],
        "outputs": [{"name": "OUTPUT0", "datatype": datatype, "shape": [-1, -1]}],
    }
    gmeta = grpc_client.get_model_metadata(model)
    assert gmeta.inputs[0].datatype == datatype
    assert list(gmeta.inputs[0].shape) == [-1, -1]
    assert gmeta.platform == "onnxruntime_onnx"


def test_model_metadata_unknown(server, http_client, grpc_client, error_of):
    # Measured on Triton 2.51: NOT_FOUND, i.e. 404 over HTTP.
    e = error_of(http_client.get_model_metadata, "nope")
    assert (e.status(), e.message()) == ("404", "Request for unknown model: 'nope' is not found")
    e = error_of(grpc_client.get_model_metadata, "nope")
    assert (e.status(), e.message()) == (
        "StatusCode.NOT_FOUND",
        "Request for unknown model: 'nope' is not found",
    )
    e = error_of(http_client.get_model_metadata, "add_sub", "3")
    assert (e.status(), e.message()) == (
        "404",
        "Request for unknown model: 'add_sub' version 3 is not found",
    )
    e = error_of(grpc_client.get_model_metadata, "add_sub", "3")
    assert e.status() == "StatusCode.NOT_FOUND"
    # Versions must be digits; anything else is not a route at all.
    resp = server.request("GET", "/v2/models/add_sub/versions/x")
    assert (resp.status, resp.json()) == (404, {"error": "Not Found"})


def test_model_ready(server, http_client, grpc_client):
    assert http_client.is_model_ready("add_sub")
    assert http_client.is_model_ready("add_sub", "1")
    assert not http_client.is_model_ready("nope")
    assert not http_client.is_model_ready("add_sub", "3")
    assert grpc_client.is_model_ready("add_sub")
    assert grpc_client.is_model_ready("add_sub", "1")
    assert not grpc_client.is_model_ready("nope")
    assert not grpc_client.is_model_ready("add_sub", "3")

    resp = server.request("GET", "/v2/models/add_sub/ready")
    assert (resp.status, resp.body) == (200, b"")
    # Triton answers 400 (not 404) for a model or version that is not ready.
    resp = server.request("GET", "/v2/models/nope/ready")
    assert (resp.status, resp.json()) == (400, {"error": "Model version not ready"})
    resp = server.request("GET", "/v2/models/add_sub/versions/3/ready")
    assert (resp.status, resp.json()) == (400, {"error": "Model version not ready"})


def _subset(expected, actual, path="config"):
    """Assert every key of `expected` is in `actual` with that value (recursively)."""
    for key, value in expected.items():
        assert key in actual, f"{path}.{key} missing from {actual}"
        if isinstance(value, dict) and value:
            _subset(value, actual[key], f"{path}.{key}")
        else:
            assert actual[key] == value, f"{path}.{key}: {actual[key]!r} != {value!r}"


def test_model_config_http(http_client):
    cfg = http_client.get_model_config("add_sub")
    # Normalized config as Triton prints it: every default present. dims are JSON
    # numbers ([4]) over HTTP: measured on Triton 2.51 (its JSON writer does not
    # quote int64 the way protobuf-JSON does).
    _subset(
        {
            "name": "add_sub",
            "platform": "onnxruntime_onnx",
            "backend": "onnxruntime",
            "runtime": "",
            "version_policy": {"latest": {"num_versions": 1}},
            "max_batch_size": 8,
            "batch_input": [],
            "batch_output": [],
            "optimization": {
                "priority": "PRIORITY_DEFAULT",
                "input_pinned_memory": {"enable": True},
                "output_pinned_memory": {"enable": True},
            },
            "default_model_filename": "model.onnx",
            "parameters": {},
            "model_warmup": [],
        },
        cfg,
    )
    assert cfg["version_policy"] == {"latest": {"num_versions": 1}}
    assert len(cfg["input"]) == 2 and len(cfg["output"]) == 2
    for i, name in enumerate(("INPUT0", "INPUT1")):
        _subset(
            {
                "name": name,
                "data_type": "TYPE_FP32",
                "format": "FORMAT_NONE",
                "dims": [4],
                "is_shape_tensor": False,
                "allow_ragged_batch": False,
                "optional": False,
            },
            cfg["input"][i],
        )
    for i, name in enumerate(("OUTPUT0", "OUTPUT1")):
        _subset(
            {
                "name": name,
                "data_type": "TYPE_FP32",
                "dims": [4],
                "label_filename": "",
                "is_shape_tensor": False,
            },
            cfg["output"][i],
        )
    assert len(cfg["instance_group"]) == 1
    _subset(
        {
            "name": "add_sub_0",
            "kind": "KIND_CPU",
            "count": 1,
            "gpus": [],
            "passive": False,
            "host_policy": "",
        },
        cfg["instance_group"][0],
    )
    # add_sub has no scheduler section: the default scheduler, nothing printed.
    assert "dynamic_batching" not in cfg
    assert "sequence_batching" not in cfg


def test_model_config_versioned_and_unknown(http_client, grpc_client, error_of):
    assert http_client.get_model_config("add_sub", "1")["name"] == "add_sub"
    e = error_of(http_client.get_model_config, "nope")
    assert (e.status(), e.message()) == ("404", "Request for unknown model: 'nope' is not found")
    e = error_of(http_client.get_model_config, "add_sub", "3")
    assert (e.status(), e.message()) == (
        "404",
        "Request for unknown model: 'add_sub' version 3 is not found",
    )
    e = error_of(grpc_client.get_model_config, "nope")
    assert (e.status(), e.message()) == (
        "StatusCode.NOT_FOUND",
        "Request for unknown model: 'nope' is not found",
    )


def test_model_config_identity_defaults(http_client):
    cfg = http_client.get_model_config("identity_fp32")
    assert cfg["platform"] == "onnxruntime_onnx"
    assert cfg["backend"] == "onnxruntime"
    assert cfg["input"][0]["dims"] == [-1]
    # No instance_group in config.pbtxt: Triton adds one group named after the
    # model, KIND_CPU without GPUs, count 2 for the onnxruntime backend on CPU
    # (core model_config_utils.cc NormalizeInstanceGroup / SetDefaultInstanceCount).
    assert len(cfg["instance_group"]) == 1
    _subset(
        {"name": "identity_fp32", "kind": "KIND_CPU", "count": 2},
        cfg["instance_group"][0],
    )


def test_model_config_grpc(grpc_client):
    cfg = grpc_client.get_model_config("add_sub").config
    assert cfg.name == "add_sub"
    assert cfg.platform == "onnxruntime_onnx"
    assert cfg.backend == "onnxruntime"
    assert cfg.max_batch_size == 8
    assert [(i.name, i.data_type, list(i.dims)) for i in cfg.input] == [
        ("INPUT0", model_config_pb2.TYPE_FP32, [4]),
        ("INPUT1", model_config_pb2.TYPE_FP32, [4]),
    ]
    assert [(o.name, o.data_type, list(o.dims)) for o in cfg.output] == [
        ("OUTPUT0", model_config_pb2.TYPE_FP32, [4]),
        ("OUTPUT1", model_config_pb2.TYPE_FP32, [4]),
    ]
    assert len(cfg.instance_group) == 1
    group = cfg.instance_group[0]
    assert (group.name, group.kind, group.count) == (
        "add_sub_0",
        model_config_pb2.ModelInstanceGroup.KIND_CPU,
        1,
    )
    assert cfg.version_policy.WhichOneof("policy_choice") == "latest"
    assert cfg.version_policy.latest.num_versions == 1
    assert cfg.WhichOneof("scheduling_choice") is None

    # The client's protobuf-JSON form: int64 dims are strings there.
    as_json = grpc_client.get_model_config("add_sub", as_json=True)["config"]
    assert as_json["input"][0] == {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": ["4"]}
    assert as_json["instance_group"][0]["name"] == "add_sub_0"
    assert as_json["instance_group"][0]["kind"] == "KIND_CPU"
    assert as_json["version_policy"] == {"latest": {"num_versions": 1}}


def test_id_names_the_server(make_repo, start_server):
    srv = start_server(make_repo([]), "--id", "edge-7")
    assert srv.http_client().get_server_metadata()["name"] == "edge-7"
    assert srv.grpc_client().get_server_metadata().name == "edge-7"
