"""Model repositories in cloud storage (issue 36), through the binary with tritonclient,
against storage servers the test starts: moto's S3 server, Microsoft's Azurite (npm) and
gcp-storage-emulator (extended by gcs_xml_emulator.py with the XML listing and download
validators object_store's GCS client uses). Each serves the example repository's add_sub from
`s3://host:port/bucket/models`, `as://account/container/models` and
`gs://bucket/models`; a changed configuration is picked up in poll mode; wrong
credentials stop start-up with the URL and the storage's reason; a storage that goes
away leaves the models served. Nothing here reaches the network.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient

from conftest import EXAMPLE_MODELS, REPO_ROOT, Server, base_args, wait_for

pytestmark = pytest.mark.timeout(300)

VENV_BIN = os.path.dirname(sys.executable)
AZURITE = os.path.join(REPO_ROOT, ".cache", "azurite", "node_modules", ".bin", "azurite-blob")
# Azurite's well-known development account.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
               "KBHBeksoGMGw==")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need(path, what):
    """Skips (fails under CI=true, as conftest does for skips) when `path` is missing."""
    if not os.path.exists(path):
        pytest.skip(f"{what} is not installed ({path}); scripts/test.sh installs it")


def wait_port(port, process, log):
    def up():
        assert process.poll() is None, open(log).read()
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0
    wait_for(up, timeout=30, what=f"storage server on port {port}")


def start(argv, port, tmp_path, env=None):
    log = str(tmp_path / f"storage-{port}.log")
    process = subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                               env={**os.environ, **(env or {})})
    wait_port(port, process, log)
    return process


def model_files():
    """The example add_sub model, as (object name under the repository, bytes)."""
    root = os.path.join(EXAMPLE_MODELS, "add_sub")
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, EXAMPLE_MODELS)
            yield rel.replace(os.sep, "/"), open(path, "rb").read()


class S3:
    """moto's S3 server, written to with boto3."""

    scheme = "s3"
    folder_markers = True

    def __init__(self, tmp_path):
        need(os.path.join(VENV_BIN, "moto_server"), "moto[server]")
        import boto3

        self.port = free_port()
        self.process = start([os.path.join(VENV_BIN, "moto_server"), "-p", str(self.port)], self.port, tmp_path)
        self.client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{self.port}", region_name="us-east-1",
                                   aws_access_key_id="testing", aws_secret_access_key="testing")
        self.client.create_bucket(Bucket="bucket")
        self.url = f"s3://127.0.0.1:{self.port}/bucket/models"
        self.env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_DEFAULT_REGION": "us-east-1"}

    def put(self, name, data):
        self.client.put_object(Bucket="bucket", Key=f"models/{name}", Body=data)

    def delete_bucket(self):
        for item in self.client.list_objects_v2(Bucket="bucket").get("Contents", []):
            self.client.delete_object(Bucket="bucket", Key=item["Key"])
        self.client.delete_bucket(Bucket="bucket")

    def bad_env(self):
        # moto checks nothing by default: a wrong endpoint stands for refused access.
        return {}, f"s3://127.0.0.1:{free_port()}/bucket/models"

    def stop(self):
        self.process.kill()


class Azure:
    """Azurite's blob service, written to with azure-storage-blob."""

    scheme = "as"
    folder_markers = True

    def __init__(self, tmp_path):
        need(AZURITE, "Azurite (npm)")
        from azure.storage.blob import BlobServiceClient

        self.port = free_port()
        data = tmp_path / "azurite"
        data.mkdir()
        self.process = start([AZURITE, "--blobHost", "127.0.0.1", "--blobPort", str(self.port), "--location",
                              str(data), "--silent", "--skipApiVersionCheck", "--loose"], self.port, tmp_path)
        endpoint = f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"
        service = BlobServiceClient(account_url=endpoint,
                                    credential={"account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY})
        self.container = service.create_container("container")
        self.url = f"as://{AZURITE_ACCOUNT}/container/models"
        self.env = {"AZURE_STORAGE_ACCOUNT": AZURITE_ACCOUNT, "AZURE_STORAGE_KEY": AZURITE_KEY,
                    "AZURE_STORAGE_USE_EMULATOR": "true",
                    "AZURITE_BLOB_STORAGE_URL": f"http://127.0.0.1:{self.port}"}

    def put(self, name, data):
        self.container.upload_blob(f"models/{name}", data, overwrite=True)

    def delete_bucket(self):
        self.container.delete_container()

    def bad_env(self):
        wrong = AZURITE_KEY[:-6] + "AAAA=="
        return {**self.env, "AZURE_STORAGE_KEY": wrong}, self.url

    def stop(self):
        self.process.kill()


class Gcs:
    """gcp-storage-emulator, written to over its JSON API and read by Nereid over the
    XML API (gcs_xml_emulator.py adds the parts the emulator lacks); the server is named
    by a service-account file's `gcs_base_url` (GOOGLE_APPLICATION_CREDENTIALS)."""

    scheme = "gs"
    # The emulator stores neither empty objects nor names ending in a slash.
    folder_markers = False

    def __init__(self, tmp_path):
        need(os.path.join(VENV_BIN, "gcp-storage-emulator"), "gcp-storage-emulator")
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process = start([sys.executable, os.path.join(os.path.dirname(__file__), "gcs_xml_emulator.py"),
                              "127.0.0.1", str(self.port)], self.port, tmp_path)
        self.call("POST", "/storage/v1/b", json.dumps({"name": "bucket"}).encode(), "application/json")
        key = tmp_path / "service-account.json"
        key.write_text(json.dumps({"type": "service_account", "private_key": "", "private_key_id": "",
                                   "client_email": "test@example.com", "gcs_base_url": self.base,
                                   "disable_oauth": True}))
        self.url = "gs://bucket/models"
        self.env = {"GOOGLE_APPLICATION_CREDENTIALS": str(key)}
        self.tmp_path = tmp_path

    def call(self, method, path, body=None, content_type="application/octet-stream"):
        request = urllib.request.Request(self.base + path, data=body, method=method,
                                         headers={"Content-Type": content_type})
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read()

    def put(self, name, data):
        quoted = urllib.parse.quote(f"models/{name}", safe="")
        self.call("POST", f"/upload/storage/v1/b/bucket/o?uploadType=media&name={quoted}", data)

    def delete_bucket(self):
        self.stop()

    def bad_env(self):
        missing = self.tmp_path / "missing.json"
        return {"GOOGLE_APPLICATION_CREDENTIALS": str(missing)}, self.url

    def stop(self):
        self.process.kill()


@pytest.fixture(params=[S3, Azure, Gcs], ids=["s3", "azure", "gcs"])
def storage(request, tmp_path):
    store = request.param(tmp_path)
    try:
        for name, data in model_files():
            store.put(name, data)
        yield store
    finally:
        store.stop()


def add_sub_inputs():
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    inputs = [httpclient.InferInput("INPUT0", [1, 4], "FP32"), httpclient.InferInput("INPUT1", [1, 4], "FP32")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    return a, inputs


def serve(store, tmp_path, *extra, env=None, url=None):
    server = Server(url or store.url, base_args(url or store.url, list(extra)), env={**store.env, **(env or {})})
    return server


def test_a_bucket_repository_serves_and_polls(storage, tmp_path):
    server = serve(storage, tmp_path, "--model-control-mode=poll", "--repository-poll-secs=1").wait_started()
    client = server.http_client()
    a, inputs = add_sub_inputs()
    assert (client.infer("add_sub", inputs).as_numpy("OUTPUT0") == a + a).all()
    # A changed configuration in the bucket is picked up by the next poll.
    config = open(os.path.join(EXAMPLE_MODELS, "add_sub", "config.pbtxt")).read()
    storage.put("add_sub/config.pbtxt", (config + "\nparameters { key: \"changed\" value { string_value: \"yes\" } }\n").encode())
    wait_for(lambda: "changed" in client.get_model_config("add_sub").get("parameters", {}), timeout=20,
             what="the changed configuration")
    # A storage that goes away: the next polls fail, the model keeps serving.
    storage.delete_bucket()
    time.sleep(2.5)
    assert (client.infer("add_sub", inputs).as_numpy("OUTPUT1") == a - a).all()
    assert client.is_model_ready("add_sub")
    server.kill()


def test_explicit_mode_loads_and_unloads_from_the_bucket(storage, tmp_path):
    server = serve(storage, tmp_path, "--model-control-mode=explicit").wait_started()
    client = server.http_client()
    assert not client.is_model_ready("add_sub")
    client.load_model("add_sub")
    a, inputs = add_sub_inputs()
    assert (client.infer("add_sub", inputs).as_numpy("OUTPUT0") == a + a).all()
    client.unload_model("add_sub")
    wait_for(lambda: not client.is_model_ready("add_sub"), what="the unload")
    server.kill()


def test_refused_credentials_stop_start_up_naming_the_url(storage, tmp_path):
    env, url = storage.bad_env()
    server = Server(url, base_args(url, []), env=env)
    code = server.wait_exit(60)  # also waits for the reader thread: the log is whole
    log = server.log()
    assert code not in (None, 0), log
    assert url in log, log
    for name, value in env.items():
        if "KEY" in name or "SECRET" in name:
            assert value not in log, f"{name} in the log"


DOUBLE_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", 2 * pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
                for r in requests]
'''

DOUBLE_CONFIG = b'''backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
'''


def test_a_bucket_beside_a_local_repository_serves_ensembles_and_hosted_models(storage, tmp_path):
    from triton_wheel import python_backend_directory, stub_environment

    # An ensemble's empty version folder, as a storage console makes it: an empty object
    # named with a trailing slash. The python backend reads model.py from the local copy.
    storage.put("ensemble_add_sub/config.pbtxt",
                open(os.path.join(EXAMPLE_MODELS, "ensemble_add_sub", "config.pbtxt"), "rb").read())
    if storage.folder_markers:
        storage.put("ensemble_add_sub/1/", b"")
    else:
        storage.put("ensemble_add_sub/1/README", b"version 1 of an ensemble has no files")
    storage.put("double/config.pbtxt", DOUBLE_CONFIG)
    storage.put("double/1/model.py", DOUBLE_PY.encode())
    local = tmp_path / "local"
    shutil.copytree(os.path.join(EXAMPLE_MODELS, "identity_fp32"), local / "identity_fp32")
    args = base_args(storage.url, ["--model-repository", str(local), "--backend-directory",
                                   python_backend_directory()])
    server = Server(storage.url, args, env={**storage.env, **stub_environment()}).wait_started()
    client = server.http_client()
    a, inputs = add_sub_inputs()
    out = client.infer("ensemble_add_sub", inputs)
    assert (out.as_numpy("OUTPUT0") == 2 * a).all() and (out.as_numpy("OUTPUT1") == 2 * a).all()
    x = np.array([1.5, -2.0], dtype=np.float32)
    double = httpclient.InferInput("IN", [2], "FP32")
    double.set_data_from_numpy(x)
    assert (client.infer("double", [double]).as_numpy("OUT") == 2 * x).all()
    assert {m["name"] for m in client.get_model_repository_index()} >= {
        "add_sub", "ensemble_add_sub", "double", "identity_fp32"}
    assert client.is_model_ready("identity_fp32")
    server.kill()
