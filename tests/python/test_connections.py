"""Connection limits on the real binary (issue 14, items 5 and 7): idle, header and
body timeouts, the connection cap and its log line, the listen backlog, the raised
open file limit, and gRPC's input size limit. Timeouts are set to 1-2 s so each test
takes a few seconds; each socket-level check reads with a deadline, so a server that
never closes a connection fails the test instead of hanging it."""

import resource
import socket
import subprocess
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from conftest import EXAMPLE_MODELS, expect_error, wait_for

LIVE = b"GET /v2/health/live HTTP/1.1\r\nHost: nereid\r\n\r\n"
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def connect(url):
    host, port = url.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def closed_after(sock, within):
    """Seconds until the server closed `sock` (reading and discarding whatever it sends
    first); fails if it is still open after `within` seconds."""
    start = time.monotonic()
    sock.settimeout(0.1)
    while time.monotonic() - start < within:
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - start
        except socket.timeout:
            continue
        except ConnectionResetError:
            return time.monotonic() - start
    pytest.fail(f"connection still open after {within}s")


def still_open(sock, after):
    """True if the server has not closed `sock` within `after` seconds."""
    sock.settimeout(after)
    try:
        return sock.recv(65536) != b""
    except socket.timeout:
        return True
    except ConnectionResetError:
        return False


def read_response(sock):
    """One HTTP/1.1 response with a Content-Length body: (status, headers, body)."""
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        body += sock.recv(65536)
    return int(lines[0].split()[1]), headers, body


def test_idle_keep_alive_connection_is_closed_after_the_idle_timeout(start_server):
    srv = start_server(EXAMPLE_MODELS, "--http-idle-timeout-secs", "1")
    sock = connect(srv.http_url)
    sock.sendall(LIVE)
    status, headers, _ = read_response(sock)
    assert status == 200 and headers.get("connection") != "close"
    waited = closed_after(sock, within=5)
    assert waited > 0.7, f"closed after {waited:.2f}s, before the idle timeout"
    # The metrics port has the same limit.
    metrics = connect(srv.metrics_url)
    closed_after(metrics, within=5)


def test_unfinished_request_head_is_closed_after_the_header_timeout(start_server):
    srv = start_server(EXAMPLE_MODELS, "--http-header-timeout-secs", "1")
    slow = connect(srv.http_url)
    silent = connect(srv.http_url)
    slow.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: nereid\r\n")  # never finished
    waited = closed_after(slow, within=5)
    assert 0.7 < waited < 4, waited
    # The header timer starts with the head's first byte: a connection that has sent
    # nothing is idle, not slow, and lives until the (default 300 s) idle timeout.
    assert still_open(silent, after=0.5)
    silent.sendall(LIVE)
    assert read_response(silent)[0] == 200


def test_stalled_request_body_gets_408_and_the_connection_is_closed(start_server):
    srv = start_server(EXAMPLE_MODELS, "--http-body-timeout-secs", "1")
    sock = connect(srv.http_url)
    sock.sendall(
        b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: nereid\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        b'{"inputs":'
    )
    start = time.monotonic()
    status, headers, body = read_response(sock)
    assert status == 408, body
    assert 0.7 < time.monotonic() - start < 4
    assert headers["connection"] == "close"
    assert b"request body not received" in body
    closed_after(sock, within=2)
    assert srv.request("GET", "/v2/health/live").status == 200


def test_connection_over_the_cap_is_refused_and_logged(start_server):
    srv = start_server(EXAMPLE_MODELS, "--max-connections", "3")
    idle = [connect(srv.http_url) for _ in range(2)]
    busy = connect(srv.http_url)
    busy.sendall(LIVE)
    assert read_response(busy)[0] == 200  # all three places taken
    refused = connect(srv.http_url)  # the kernel accepts; the server closes it at once
    waited = closed_after(refused, within=2)
    assert waited < 1, waited
    wait_for(lambda: "refused a connection" in srv.log(), timeout=5, what="refusal log line")
    line = next(l for l in srv.log().splitlines() if "refused a connection" in l)
    assert "HTTP port" in line and "--max-connections" in line and line.startswith("W"), line
    # The connections within the cap are still served.
    busy.sendall(LIVE)
    assert read_response(busy)[0] == 200
    # A closed connection frees its place.
    idle.pop().close()

    def served():
        try:
            with connect(srv.http_url) as sock:
                sock.sendall(LIVE)
                return read_response(sock)[0] == 200
        except (AssertionError, OSError):
            return False

    wait_for(served, timeout=5, what="a new connection once one closed")


def test_idle_grpc_connection_gets_a_goaway_is_closed_and_clients_reconnect(start_server):
    srv = start_server(EXAMPLE_MODELS, "--grpc-idle-timeout-secs", "1")
    sock = connect(srv.grpc_url)
    sock.sendall(H2_PREFACE + H2_EMPTY_SETTINGS)
    start, received = time.monotonic(), b""
    sock.settimeout(5)
    while chunk := sock.recv(65536):
        received += chunk
    assert time.monotonic() - start > 0.7
    # Before the close, a GOAWAY NO_ERROR naming stream 0 (none was opened), as gRPC
    # core's max_connection_idle says it.
    frames = h2_frames(received)
    assert frames[-1] == (0x7, 0, 0), frames
    goaway = received[-(8 + len(b"idle_timeout")):]
    assert goaway == bytes(8) + b"idle_timeout", goaway
    # A client whose idle connection was closed reconnects for its next call.
    client = srv.grpc_client()
    assert client.is_server_live()
    time.sleep(1.5)
    assert client.is_server_live()
    client.close()


def h2_frame(kind, flags, stream, payload):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def hpack_literal(name, value):
    """A header as HPACK's literal without indexing, new name, no Huffman coding."""
    name, value = name.encode(), value.encode()
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def h2_frames(data):
    """(type, flags, stream id) of each complete frame in `data`."""
    frames = []
    while len(data) >= 9:
        length = int.from_bytes(data[:3], "big")
        frames.append((data[3], data[4], int.from_bytes(data[5:9], "big") & 0x7FFFFFFF))
        data = data[9 + length:]
    return frames


def test_a_unary_grpc_call_whose_message_stalls_fails_after_the_body_timeout(start_server):
    srv = start_server(EXAMPLE_MODELS, "--grpc-body-timeout-secs", "1")
    sock = connect(srv.grpc_url)
    headers = b"".join(hpack_literal(k, v) for k, v in (
        (":method", "POST"), (":scheme", "http"), (":path", "/inference.GRPCInferenceService/ModelInfer"),
        (":authority", "nereid"), ("content-type", "application/grpc"), ("te", "trailers")))
    # A message announced as 100 bytes of which 10 arrive; the rest never does.
    partial = b"\x00" + (100).to_bytes(4, "big") + b"\x0a" * 10
    sock.sendall(H2_PREFACE + H2_EMPTY_SETTINGS + h2_frame(1, 0x4, 1, headers) + h2_frame(0, 0, 1, partial))
    started = time.monotonic()
    received = b""
    sock.settimeout(10)
    # The call ends on stream 1 (trailers with END_STREAM, or RST_STREAM) within a few s.
    while not any(stream == 1 and (kind == 3 or (kind == 1 and flags & 0x1))
                  for kind, flags, stream in h2_frames(received)):
        chunk = sock.recv(65536)
        assert chunk, "the connection closed instead of the call failing"
        received += chunk
    waited = time.monotonic() - started
    assert 0.7 < waited < 5, waited
    # The connection is still good for other calls: a new client's call succeeds.
    client = srv.grpc_client()
    assert client.is_server_live()
    client.close()
    sock.close()


def infer_identity(client, values, **kwargs):
    inp = grpcclient.InferInput("INPUT0", [1, values.size], "FP32")
    inp.set_data_from_numpy(values.reshape(1, -1))
    return client.infer("identity_fp32", [inp], **kwargs)


def test_grpc_message_over_the_input_size_is_refused(start_server):
    srv = start_server(EXAMPLE_MODELS, "--grpc-max-input-size", "65536")
    client = srv.grpc_client()
    big = np.zeros(32 * 1024, dtype=np.float32)  # 128 KiB
    err = expect_error(infer_identity, client, big)
    assert err.status() == "StatusCode.RESOURCE_EXHAUSTED", err  # as Triton answers
    assert "too large" in err.message(), err
    # 4 MiB of zeros is a few KiB compressed: refused while inflating, not after.
    huge = np.zeros(1024 * 1024, dtype=np.float32)
    err = expect_error(infer_identity, client, huge, compression_algorithm="gzip")
    assert err.status() == "StatusCode.RESOURCE_EXHAUSTED", err
    assert "size limit" in err.message(), err
    small = np.arange(8, dtype=np.float32)
    result = infer_identity(client, small, compression_algorithm="gzip")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0").reshape(-1), small)
    client.close()


def test_grpc_compressed_message_is_held_to_the_decompressed_size(start_server):
    # Uncompressed messages may be as large as Triton's 2 GiB bound; a compressed one
    # only inflates to --grpc-max-decompressed-size (Triton inflates to 2 GiB too).
    srv = start_server(EXAMPLE_MODELS, "--grpc-max-decompressed-size", "65536")
    client = srv.grpc_client()
    big = np.arange(256 * 1024, dtype=np.float32)  # 1 MiB
    result = infer_identity(client, big)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0").reshape(-1), big)
    # 1 MiB of zeros is a few KiB compressed: refused while inflating, not after.
    zeros = np.zeros(256 * 1024, dtype=np.float32)
    err = expect_error(infer_identity, client, zeros, compression_algorithm="gzip")
    assert err.status() == "StatusCode.RESOURCE_EXHAUSTED", err
    assert "size limit" in err.message(), err
    result = infer_identity(client, big[:8], compression_algorithm="deflate")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0").reshape(-1), big[:8])
    client.close()


def test_listen_backlog_is_somaxconn(server):
    with open("/proc/sys/net/core/somaxconn") as f:
        somaxconn = int(f.read())
    for url in (server.http_url, server.grpc_url, server.metrics_url):
        port = url.rsplit(":", 1)[1]
        out = subprocess.run(
            ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=True
        ).stdout.split()
        # State Recv-Q Send-Q Local Peer: for a listener, Send-Q is the backlog.
        assert out[0] == "LISTEN" and int(out[2]) == somaxconn, (url, out)


def test_open_file_limit_is_raised_to_the_hard_limit(start_server):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(1024, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    try:
        srv = start_server(EXAMPLE_MODELS)  # inherits the low soft limit
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    with open(f"/proc/{srv.proc.pid}/limits") as f:
        line = next(l for l in f if l.startswith("Max open files"))
    assert line.split()[3:5] == [str(hard), str(hard)], line
    if low < hard:
        assert "raised the open file limit" in srv.log()
