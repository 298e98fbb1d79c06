"""HAProxy in front of nereid replicas, for tests/python/test_scale_out.py.

The proxy runs the example configuration users get, deploy/haproxy/haproxy.cfg, with
only its addresses, socket path and check timings replaced (`render_config`), so the
test exercises the shipped file. HAProxy is Debian's package (2.6), started in the
foreground (`haproxy -f CFG -db`); its runtime API (the stats socket) is used to read
server states and to add a replica while it runs.
"""

import os
import re
import shutil
import socket
import subprocess

from conftest import REPO_ROOT, wait_for

TEMPLATE = os.path.join(REPO_ROOT, "deploy", "haproxy", "haproxy.cfg")
BACKENDS = ("nereid_http", "nereid_grpc")
# Health checks for a test: a replica is out after one failed check, back after one good
# one, checked every 100 ms (the example checks every second, out after two).
TEST_CHECKS = "inter 100ms fall 1 rise 1"


def _replace(text, pattern, repl, count):
    """re.subn that insists the template still has exactly `count` matches."""
    text, n = re.subn(pattern, repl, text, flags=re.MULTILINE)
    assert n == count, f"{TEMPLATE}: expected {count} match(es) of {pattern!r}, found {n}"
    return text


def render_config(http_port, grpc_port, socket_path, replicas):
    """The example configuration with the proxy on 127.0.0.1:http_port/grpc_port, the
    runtime API on socket_path, and replicas = [(http_port, grpc_port)] for its three
    servers nereid1..nereid3 (10.0.0.11..13 in the file)."""
    assert len(replicas) == 3
    text = open(TEMPLATE).read()
    text = _replace(text, r"^(\s*stats socket )\S+", rf"\g<1>{socket_path}", 1)
    text = _replace(text, r"^(\s*bind ):8000$", rf"\g<1>127.0.0.1:{http_port}", 1)
    text = _replace(text, r"^(\s*bind ):8001 ", rf"\g<1>127.0.0.1:{grpc_port} ", 1)
    text = _replace(text, r"^(\s*default-server ).*$", rf"\g<1>{TEST_CHECKS}", 1)
    for i, (http, grpc) in enumerate(replicas, start=1):
        text = _replace(text, rf"(server nereid{i} )10\.0\.0\.1{i}:8000 ", rf"\g<1>127.0.0.1:{http} ", 1)
        text = _replace(
            text,
            rf"(server nereid{i} )10\.0\.0\.1{i}:8001 (.*)check port 8000 ",
            rf"\g<1>127.0.0.1:{grpc} \g<2>check port {http} ",
            1,
        )
    return text


def server_args(backend, http_port, grpc_port):
    """`add server` arguments for one replica in one backend, as the static servers
    are configured (a dynamic server takes nothing from default-server)."""
    if backend == "nereid_http":
        return f"127.0.0.1:{http_port} check {TEST_CHECKS}"
    return f"127.0.0.1:{grpc_port} proto h2 check port {http_port} check-proto h1 {TEST_CHECKS}"


class HAProxy:
    """One `haproxy -db` process; its log (request log and state changes) goes to a file."""

    def __init__(self, tmp_path, http_port, grpc_port, replicas):
        binary = shutil.which("haproxy")
        assert binary, "haproxy is needed (apt-get install haproxy)"
        self.socket_path = str(tmp_path / "haproxy.sock")
        assert len(self.socket_path) < 100, f"unix socket path too long: {self.socket_path}"
        self.http_url = f"127.0.0.1:{http_port}"
        self.grpc_url = f"127.0.0.1:{grpc_port}"
        self.config_path = tmp_path / "haproxy.cfg"
        self.config_path.write_text(render_config(http_port, grpc_port, self.socket_path, replicas))
        self.log_path = tmp_path / "haproxy.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [binary, "-f", str(self.config_path), "-db"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def log(self):
        return self.log_path.read_text(errors="replace")

    def command(self, line):
        """One runtime API command; its answer as text."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(self.socket_path)
            s.sendall(line.encode() + b"\n")
            chunks = []
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def states(self):
        """{(backend, server): status} from `show stat`, e.g. "UP", "DOWN", "MAINT"."""
        lines = self.command("show stat").splitlines()
        header = lines[0].lstrip("# ").split(",")
        pxname, svname, status = header.index("pxname"), header.index("svname"), header.index("status")
        states = {}
        for line in lines[1:]:
            fields = line.split(",")
            if len(fields) > status and fields[pxname] in BACKENDS and fields[svname] != "BACKEND":
                states[(fields[pxname], fields[svname])] = fields[status]
        return states

    def _states_or_none(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"haproxy exited with {self.proc.returncode}:\n{self.log()}")
        try:
            return self.states()
        except OSError:
            return None  # the socket is not there yet

    def wait_servers(self, name, status, timeout=10):
        """Wait until server `name` has `status` in both backends."""

        def reached():
            states = self._states_or_none()
            return states and all(states.get((b, name), "").startswith(status) for b in BACKENDS)

        wait_for(reached, timeout=timeout, interval=0.05, what=f"haproxy: {name} {status}")

    def add_replica(self, name, http_port, grpc_port):
        """Add a running replica to both backends through the runtime API, with health
        checks, and wait until HAProxy sends it traffic."""
        for backend in BACKENDS:
            for line in (
                f"add server {backend}/{name} {server_args(backend, http_port, grpc_port)}",
                f"enable health {backend}/{name}",
                f"enable server {backend}/{name}",
            ):
                answer = self.command(line).strip()
                # `add server` says "New server registered."; the others answer nothing.
                assert answer in ("", "New server registered."), f"{line!r}: {answer!r}"
        self.wait_servers(name, "UP")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
