"""A decoupled model that produces far faster than its client reads is held back, not
buffered (issue 38, item 4), through the binary: Triton's python backend sends 600
responses of 1 MiB to a gRPC stream whose client stops reading after the first (and 200
of 256 KiB, about 800 KB of JSON each, to a generate stream left unread); the server's
resident memory stays within a bound well below what the responses would take, and the
client then reads every response, in order.
"""

import json
import re
import socket
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from conftest import rss_mib
from triton_wheel import python_backend_directory, stub_environment

pytestmark = pytest.mark.timeout(300)

RESPONSES = 600
ELEMENTS = 1 << 18  # 1 MiB of FP32 per response
# What the server may hold for one stalled stream: the core's 32 buffered responses, the
# gRPC stream's 16 MiB of decoupled answers and the HTTP/2 windows, with room for the
# allocator (59–64 MiB measured). Without the bounds the whole 600 MiB piles up (596–600
# MiB measured).
GROWTH_BOUND_MIB = 100

FLOOD_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils

RESPONSES, ELEMENTS = {responses}, {elements}


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            for i in range(RESPONSES):
                out = np.full([ELEMENTS], i, np.float32)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

FLOOD_CONFIG = '''backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ {elements} ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
'''


SMALL_RESPONSES, SMALL_ELEMENTS = 200, 1 << 16  # the generate stream's: 256 KiB, ~800 KB as JSON
# Measured: 23–26 MiB bounded, 107 MiB before the bound.
GENERATE_GROWTH_BOUND_MIB = 60


def start_flooding(tmp_path, start_server, *extra):
    for name, responses, elements in (("flood", RESPONSES, ELEMENTS),
                                      ("flood_small", SMALL_RESPONSES, SMALL_ELEMENTS)):
        model = tmp_path / name
        (model / "1").mkdir(parents=True)
        (model / "config.pbtxt").write_text(FLOOD_CONFIG.format(elements=elements))
        (model / "1" / "model.py").write_text(FLOOD_PY.format(responses=responses, elements=elements))
    return start_server(str(tmp_path), "--backend-directory", python_backend_directory(), *extra,
                        env=stub_environment())


@pytest.fixture
def flooding_server(tmp_path, start_server):
    return start_flooding(tmp_path, start_server)


def peak_growth(pid, before):
    """The largest RSS growth over 4 s: the model would produce everything in about one."""
    peak = before
    for _ in range(40):
        time.sleep(0.1)
        peak = max(peak, rss_mib(pid))
    print(f"server RSS grew {peak - before:.0f} MiB")
    return peak - before


def test_a_stalled_grpc_stream_holds_the_model_back(flooding_server):
    srv = flooding_server
    before = rss_mib(srv.proc.pid)

    first = threading.Event()
    resume = threading.Event()
    received = []
    done = threading.Event()

    def on_response(result, error):
        assert error is None, error
        response = result.get_response()
        if response.outputs:
            received.append(float(result.as_numpy("OUT")[0]))
            if len(received) == 1:
                first.set()
                resume.wait()  # the client's reader stalls: nothing more is read
        if response.parameters["triton_final_response"].bool_param:
            done.set()

    client = grpcclient.InferenceServerClient(srv.grpc_url)
    client.start_stream(callback=on_response)
    try:
        value = grpcclient.InferInput("IN", [1], "FP32")
        value.set_data_from_numpy(np.array([1], np.float32))
        client.async_stream_infer("flood", [value], enable_empty_final_response=True)
        assert first.wait(60), "no first response"
        assert peak_growth(srv.proc.pid, before) < GROWTH_BOUND_MIB
        resume.set()
        assert done.wait(120), f"only {len(received)} responses arrived"
    finally:
        resume.set()
        client.stop_stream()
    assert received == [float(i) for i in range(RESPONSES)]


def open_generate_stream(host, port):
    """A connection with a small receive buffer that has asked for flood_small's stream."""
    body = json.dumps({"IN": [1.0]}).encode()
    s = socket.create_connection((host, port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    s.sendall((f"POST /v2/models/flood_small/generate_stream HTTP/1.1\r\nHost: {host}:{port}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
    return s


def test_an_unread_generate_stream_holds_the_model_back(flooding_server):
    srv = flooding_server
    before = rss_mib(srv.proc.pid)
    host, port = srv.bound["http"]
    with open_generate_stream(host, port) as s:
        chunks = [s.recv(1 << 16)]
        assert chunks[0].startswith(b"HTTP/1.1 200"), "no stream started"
        # The core's 32 responses of 256 KiB and 16 events of ~800 KB, as most.
        assert peak_growth(srv.proc.pid, before) < GENERATE_GROWTH_BOUND_MIB
        # Read to the end: every event arrives, in order.
        while not (chunks and chunks[-1].endswith(b"0\r\n\r\n")):
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    firsts = [float(v) for v in re.findall(rb'"OUT":\[([-0-9.e+]+)', b"".join(chunks))]
    assert firsts == [float(i) for i in range(SMALL_RESPONSES)], firsts[-5:]


def test_a_client_that_stops_reading_is_closed_after_the_write_timeout(tmp_path, start_server):
    srv = start_flooding(tmp_path, start_server, "--write-timeout-secs", "2")
    host, port = srv.bound["http"]
    with open_generate_stream(host, port) as s:
        assert s.recv(1 << 16).startswith(b"HTTP/1.1 200"), "no stream started"
        time.sleep(5)  # reads nothing: the server's writes stay blocked past 2 s
        chunks = []
        while chunk := s.recv(1 << 20):
            chunks.append(chunk)
    data = b"".join(chunks)
    assert not data.endswith(b"0\r\n\r\n"), "the stream ended normally: never timed out"
    assert data.count(b"data: ") < SMALL_RESPONSES
    # The model is free again and the server answers the next client in full.
    with open_generate_stream(host, port) as s:
        chunks = []
        while not (chunks and chunks[-1].endswith(b"0\r\n\r\n")):
            chunks.append(s.recv(1 << 20))
            assert chunks[-1], "closed early"
    assert b"".join(chunks).count(b"data: ") == SMALL_RESPONSES
