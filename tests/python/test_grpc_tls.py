"""gRPC over TLS and mutual TLS (`--grpc-use-ssl`, `--grpc-use-ssl-mutual`,
`--grpc-server-cert`, `--grpc-server-key`, `--grpc-root-cert`), driven with
tritonclient's gRPC client as Triton's qa/L0_grpc (its SSL cases) does.

The certificates are made per test session with Debian's `openssl` binary
(scripts/test.sh installs it): a CA, a server certificate for 127.0.0.1 signed by
it, a client certificate signed by it, and a client certificate from another CA.
"""

import os
import shutil
import subprocess

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from conftest import EXAMPLE_MODELS, Server, add_sub_inputs, base_args


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(directory, name):
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.crt",
        cwd=directory,
    )


def _signed(directory, name, ca, extensions):
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
        "-keyout", f"{name}.key", "-out", f"{name}.csr",
        cwd=directory,
    )
    with open(os.path.join(directory, f"{name}.ext"), "w") as ext:
        ext.write(extensions)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt",
        cwd=directory,
    )


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    if shutil.which("openssl") is None:
        message = "the TLS tests make their certificates with openssl (apt-get install openssl)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    directory = str(tmp_path_factory.mktemp("certs"))
    _ca(directory, "ca")
    _ca(directory, "other_ca")
    _signed(
        directory, "server", "ca",
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    client_ext = (
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=clientAuth\n"
    )
    _signed(directory, "client", "ca", client_ext)
    _signed(directory, "stranger", "other_ca", client_ext)
    return lambda name: os.path.join(directory, name)


def _tls_args(certs, mutual):
    args = [
        "--grpc-use-ssl=true",
        f"--grpc-server-cert={certs('server.crt')}",
        f"--grpc-server-key={certs('server.key')}",
        f"--grpc-root-cert={certs('ca.crt')}",
    ]
    if mutual:
        args.append("--grpc-use-ssl-mutual=true")
    return args


def _infer(client):
    a = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
    b = np.array([[0.5, 0.5, 0.5, 0.5]], np.float32)
    result = client.infer("add_sub", add_sub_inputs(grpcclient, a, b))
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b)


def test_tls_serves_a_client_that_trusts_the_server(certs, start_server):
    srv = start_server(EXAMPLE_MODELS, *_tls_args(certs, mutual=False))
    client = grpcclient.InferenceServerClient(
        srv.grpc_url, ssl=True, root_certificates=certs("ca.crt")
    )
    assert client.is_server_live()
    _infer(client)
    plain = grpcclient.InferenceServerClient(srv.grpc_url)
    with pytest.raises(InferenceServerException):
        plain.is_server_live(client_timeout=5)


def test_mutual_tls_serves_a_client_with_a_certificate_of_the_root(certs, start_server):
    srv = start_server(EXAMPLE_MODELS, *_tls_args(certs, mutual=True))
    client = grpcclient.InferenceServerClient(
        srv.grpc_url,
        ssl=True,
        root_certificates=certs("ca.crt"),
        private_key=certs("client.key"),
        certificate_chain=certs("client.crt"),
    )
    assert client.is_server_live()
    _infer(client)


@pytest.mark.parametrize("presented", [None, "stranger"])
def test_mutual_tls_refuses_a_client_without_a_certificate_of_the_root(
    certs, start_server, presented
):
    srv = start_server(EXAMPLE_MODELS, *_tls_args(certs, mutual=True))
    identity = {}
    if presented:
        identity = {
            "private_key": certs(f"{presented}.key"),
            "certificate_chain": certs(f"{presented}.crt"),
        }
    client = grpcclient.InferenceServerClient(
        srv.grpc_url, ssl=True, root_certificates=certs("ca.crt"), **identity
    )
    with pytest.raises(InferenceServerException) as refused:
        client.is_server_live(client_timeout=5)
    # Triton 2.51 answers these clients the same way (its TLS handshake fails).
    assert "StatusCode.UNAVAILABLE" in str(refused.value)


@pytest.mark.parametrize("flag", ["grpc-server-cert", "grpc-server-key", "grpc-root-cert"])
def test_a_missing_file_stops_start_up_naming_flag_and_file(certs, tmp_path, flag):
    missing = str(tmp_path / "missing.pem")
    args = [a for a in _tls_args(certs, mutual=True) if not a.startswith(f"--{flag}=")]
    srv = Server(EXAMPLE_MODELS, base_args(EXAMPLE_MODELS, [*args, f"--{flag}={missing}"]))
    try:
        code = srv.wait_exit(20)
        log = srv.log()
        assert code not in (None, 0), log
        assert f"failed to start GRPC service: cannot read --{flag} file '{missing}'" in log, log
        assert "panicked" not in log, log
    finally:
        srv.kill()


def test_a_file_without_a_certificate_stops_start_up(certs, tmp_path):
    not_pem = tmp_path / "server.crt"
    not_pem.write_text("this is not a certificate\n")
    args = [a for a in _tls_args(certs, mutual=False) if "--grpc-server-cert=" not in a]
    srv = Server(EXAMPLE_MODELS, base_args(EXAMPLE_MODELS, [*args, f"--grpc-server-cert={not_pem}"]))
    try:
        code = srv.wait_exit(20)
        log = srv.log()
        assert code not in (None, 0), log
        assert f"--grpc-server-cert file '{not_pem}' holds no PEM certificate" in log, log
    finally:
        srv.kill()
