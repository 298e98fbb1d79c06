"""The redis cache over TLS (issue 38, item 6), through the binary against Debian's
`redis-server` listening on `--tls-port` only, with a certificate authority, a server
certificate and a client certificate the test makes with `openssl`: entries are stored and
found with Triton's keys (`tls_enabled`, `cacert` or `cacert_dir`, `cert`, `key`); a
server whose certificate the client does not trust stores nothing and the model keeps
answering; a missing or malformed file stops start-up naming it; a TLS Redis that goes
away and comes back behaves as a plain one does.
"""

import os
import shutil
import subprocess

import numpy as np
import pytest

from conftest import wait_for
from test_response_cache import A, B, CACHED, Redis, cache_stats, infer, wait_until_cached

pytestmark = pytest.mark.timeout(300)


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_authority(directory, name):
    """A self-signed authority `name`.pem / `name`.key in `directory`."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=directory)


def issue(directory, authority, name, san):
    """A certificate `name`.pem / `name`.key signed by `authority`, for `san`."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", cwd=directory)
    (directory / f"{name}.ext").write_text(f"subjectAltName={san}\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{authority}.pem", "-CAkey", f"{authority}.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=directory)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (scripts/test.sh installs it)")
    d = tmp_path_factory.mktemp("redis-tls")
    make_authority(d, "ca")
    make_authority(d, "stranger")
    issue(d, "ca", "server", "IP:127.0.0.1,DNS:localhost")
    issue(d, "ca", "client", "DNS:nereid")
    (d / "cas").mkdir()
    shutil.copy(d / "ca.pem", d / "cas" / "ca.crt")
    return d


@pytest.fixture
def tls_redis(certificates):
    d = certificates
    server = Redis(tls={"tls-cert-file": str(d / "server.pem"), "tls-key-file": str(d / "server.key"),
                        "tls-ca-cert-file": str(d / "ca.pem"), "tls-auth-clients": "yes"})
    yield server
    server.stop()


def tls_flags(redis, certificates, **keys):
    d = certificates
    settings = {"host": "127.0.0.1", "port": str(redis.port), "tls_enabled": "true",
                "cacert": str(d / "ca.pem"), "cert": str(d / "client.pem"), "key": str(d / "client.key"), **keys}
    flags = []
    for key, value in settings.items():
        if value is not None:
            flags += ["--cache-config", f"redis,{key}={value}"]
    return flags


def stored_keys(redis, certificates):
    d = certificates
    out = subprocess.run(["redis-cli", "-p", str(redis.port), "--tls", "--cacert", str(d / "ca.pem"),
                          "--cert", str(d / "client.pem"), "--key", str(d / "client.key"), "KEYS", "nereid:*"],
                         capture_output=True, text=True, check=True).stdout.split()
    return out


@pytest.mark.parametrize("trust", ["cacert", "cacert_dir"])
def test_entries_are_stored_and_found_over_tls(tls_redis, certificates, make_repo, start_server, trust):
    keys = {} if trust == "cacert" else {"cacert": None, "cacert_dir": str(certificates / "cas")}
    srv = start_server(make_repo([], {"add_sub": CACHED}), *tls_flags(tls_redis, certificates, **keys))
    client = srv.http_client()
    wait_until_cached(client)
    infer(client)
    assert cache_stats(client)["hit"] >= 1
    assert len(stored_keys(tls_redis, certificates)) == 1


def test_an_untrusted_server_stores_nothing_and_the_model_answers(tls_redis, certificates, make_repo,
                                                                    start_server):
    flags = tls_flags(tls_redis, certificates, cacert=str(certificates / "stranger.pem"))
    srv = start_server(make_repo([], {"add_sub": CACHED}), *flags)
    client = srv.http_client()
    for _ in range(3):
        np.testing.assert_array_equal(infer(client).as_numpy("OUTPUT0"), A + B)
    assert cache_stats(client)["exec"] == 3
    wait_for(lambda: "redis cache" in srv.log(), what="the handshake failure in the log")
    assert stored_keys(tls_redis, certificates) == []


@pytest.mark.parametrize("key, value, message", [
    ("cacert", "missing.pem", "cannot read cacert"),
    ("cert", "ca.key", "holds no PEM certificate"),
    ("key", "ca.pem", "holds no PEM private key"),
    ("cacert_dir", "missing-dir", "cannot read cacert_dir"),
])
def test_a_bad_file_stops_start_up_naming_it(tls_redis, certificates, make_repo, start_server, key, value,
                                             message):
    path = str(certificates / value)
    srv = start_server(make_repo([], {"add_sub": CACHED}), *tls_flags(tls_redis, certificates, **{key: path}),
                       wait=False)
    # wait_exit also waits for the reader thread, so the log holds the last words.
    assert srv.wait_exit(60) not in (None, 0)
    log = srv.log()
    assert message in log and path in log, log


def test_a_tls_redis_down_and_back(tls_redis, certificates, make_repo, start_server):
    srv = start_server(make_repo([], {"add_sub": CACHED}), *tls_flags(tls_redis, certificates))
    client = srv.http_client()
    wait_until_cached(client)
    tls_redis.stop()
    for i in range(3):
        np.testing.assert_array_equal(infer(client, a=A + i).as_numpy("OUTPUT0"), A + i + B)
    tls_redis.start()
    before = cache_stats(client)["hit"]
    wait_for(lambda: (infer(client, a=A + 42), cache_stats(client)["hit"])[1] > before, what="a hit after restart")
