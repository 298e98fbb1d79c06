"""The trace extension, `opentelemetry` mode: spans exported over OTLP/HTTP to a
collector-side receiver that decodes `ExportTraceServiceRequest` with the
`opentelemetry-proto` package; Triton's span shape (InferRequest root, a span per model
request with the `triton.*` attributes, a `compute` span, ensemble steps nested under
the ensemble's span), resource attributes, W3C context from a real OpenTelemetry client
span continued over HTTP and gRPC (forcing sampling at rate 0), and a dead or stuck
collector costing requests nothing while the lost spans are counted in /metrics."""

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client.parser import text_string_to_metric_families

from conftest import add_sub_inputs, wait_for

HTTP_ROOT_EVENTS = [
    "HTTP_RECV_START",
    "HTTP_RECV_END",
    "INFER_RESPONSE_COMPLETE",
    "HTTP_SEND_START",
    "HTTP_SEND_END",
]
GRPC_ROOT_EVENTS = [
    "GRPC_WAITREAD_START",
    "GRPC_WAITREAD_END",
    "INFER_RESPONSE_COMPLETE",
    "GRPC_SEND_START",
    "GRPC_SEND_END",
]
MODEL_EVENTS = ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
COMPUTE_EVENTS = ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"]


class Collector:
    """An OTLP/HTTP traces receiver on an ephemeral port: keeps every decoded request."""

    def __init__(self):
        self.requests = []
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with collector.lock:
                    collector.requests.append((self.path, self.headers["Content-Type"], request))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def spans(self):
        """Every span received: (resource attributes, scope name, span)."""
        out = []
        with self.lock:
            for _, _, request in self.requests:
                for rs in request.resource_spans:
                    resource = {a.key: a.value.string_value for a in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        out.extend((resource, ss.scope.name, s) for s in ss.spans)
        return out

    def trace(self, trace_id, count):
        """The `count` spans of one trace, once all have arrived."""
        wait_for(
            lambda: len([s for _, _, s in self.spans() if s.trace_id == trace_id]) >= count,
            timeout=15,
            what=f"{count} spans of trace {trace_id.hex()}",
        )
        return [s for _, _, s in self.spans() if s.trace_id == trace_id]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def collector():
    c = Collector()
    yield c
    c.close()


def otel_server(start_server, make_repo, url, *extra, env=None):
    repo = make_repo(["add_sub", "ensemble_add_sub"])
    args = [
        "--trace-config", "mode=opentelemetry",
        "--trace-config", f"opentelemetry,url={url}",
        "--trace-config", "level=TIMESTAMPS",
        "--trace-config", "opentelemetry,bsp_schedule_delay=20",
    ]
    return start_server(repo, *args, *extra, env=env)


def attributes(span):
    out = {}
    for a in span.attributes:
        v = a.value
        out[a.key] = v.string_value if v.HasField("string_value") else v.int_value
    return out


def events(span):
    return [e.name for e in span.events]


def check_nesting(spans):
    """Every span lies inside its parent, events inside their span, in order."""
    by_id = {s.span_id: s for s in spans}
    for s in spans:
        assert s.start_time_unix_nano <= s.end_time_unix_nano, s.name
        times = [e.time_unix_nano for e in s.events]
        assert times == sorted(times), (s.name, events(s))
        parent = by_id.get(s.parent_span_id)
        if parent is not None:
            assert parent.start_time_unix_nano <= s.start_time_unix_nano, s.name
            assert s.end_time_unix_nano <= parent.end_time_unix_nano, s.name


def roots(collector):
    return [s for _, _, s in collector.spans() if s.name == "InferRequest"]


def test_spans_have_tritons_shape_resource_and_scope(collector, start_server, make_repo):
    srv = otel_server(
        start_server, make_repo, f"127.0.0.1:{collector.port}/v1/traces",
        "--trace-config", "rate=1",
        "--trace-config", "opentelemetry,resource=service.name=nereid-test",
        "--trace-config", "opentelemetry,resource=deployment.environment=ci",
    )
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    with srv.http_client() as client:
        client.infer("add_sub", add_sub_inputs(httpclient, a, a), request_id="req-1")
    wait_for(lambda: roots(collector), timeout=15, what="a root span")
    trace_id = roots(collector)[0].trace_id
    spans = collector.trace(trace_id, 3)
    assert len(spans) == 3
    by_name = {s.name: s for s in spans}
    root, model, compute = by_name["InferRequest"], by_name["add_sub"], by_name["compute"]

    assert root.parent_span_id == b""
    assert model.parent_span_id == root.span_id
    assert compute.parent_span_id == model.span_id
    assert all(s.kind == Span.SPAN_KIND_SERVER for s in spans)
    assert events(root) == HTTP_ROOT_EVENTS
    assert events(model) == MODEL_EVENTS
    assert events(compute) == COMPUTE_EVENTS
    attrs = attributes(model)
    assert attrs["triton.model_name"] == "add_sub"
    assert attrs["triton.model_version"] == 1
    assert attrs["triton.trace_parent_id"] == 0
    assert attrs["triton.request_id"] == "req-1"
    assert attrs["triton.trace_id"] > 0
    check_nesting(spans)
    # Wall-clock times: the span started within the last minute.
    assert abs(root.start_time_unix_nano / 1e9 - time.time()) < 60

    resource, scope, _ = collector.spans()[0]
    assert resource["service.name"] == "nereid-test"
    assert resource["deployment.environment"] == "ci"
    assert scope == "triton-server"
    path, content_type, _ = collector.requests[0]
    assert (path, content_type) == ("/v1/traces", "application/x-protobuf")

    # The settings answer names the mode and its settings, no trace file.
    with srv.http_client() as client:
        settings = client.get_trace_settings()
    assert settings["trace_mode"] == "opentelemetry"
    assert settings["url"] == f"127.0.0.1:{collector.port}/v1/traces"
    # The batch processor's settings, given or defaulted, as Triton 2.51 lists them.
    assert settings["bsp_schedule_delay"] == "20"
    assert settings["bsp_max_queue_size"] == "2048"
    assert settings["bsp_max_export_batch_size"] == "512"
    assert "trace_file" not in settings and "log_frequency" not in settings
    grpc_settings = srv.grpc_client().get_trace_settings(as_json=True)["settings"]
    assert grpc_settings["resource"]["value"] == [
        "service.name=nereid-test",
        "deployment.environment=ci",
    ]


def test_grpc_and_ensemble_spans_nest(collector, start_server, make_repo):
    srv = otel_server(
        start_server, make_repo, f"127.0.0.1:{collector.port}/v1/traces",
        "--trace-config", "rate=1",
    )
    a = np.ones((1, 4), dtype=np.float32)
    client = srv.grpc_client()
    client.infer("ensemble_add_sub", add_sub_inputs(grpcclient, a, a))
    wait_for(lambda: roots(collector), timeout=15, what="a root span")
    spans = collector.trace(roots(collector)[0].trace_id, 4)
    by_name = {s.name: s for s in spans}
    assert set(by_name) == {"InferRequest", "ensemble_add_sub", "add_sub", "compute"}
    root, ensemble, step = by_name["InferRequest"], by_name["ensemble_add_sub"], by_name["add_sub"]
    assert events(root) == GRPC_ROOT_EVENTS
    assert ensemble.parent_span_id == root.span_id
    assert step.parent_span_id == ensemble.span_id
    assert by_name["compute"].parent_span_id == step.span_id
    assert attributes(step)["triton.trace_parent_id"] == attributes(ensemble)["triton.trace_id"]
    check_nesting(spans)


def client_context():
    """A real OpenTelemetry client span and the W3C headers it injects."""
    tracer = TracerProvider().get_tracer("test-client")
    span = tracer.start_span("client-call")
    headers = {}
    from opentelemetry import trace

    TraceContextTextMapPropagator().inject(headers, context=trace.set_span_in_context(span))
    headers["tracestate"] = "vendor=abc"
    return span.get_span_context(), headers


def test_client_context_is_continued_and_forces_sampling(collector, start_server, make_repo):
    # rate=0: only requests that carry a context are traced (Triton's documented way).
    srv = otel_server(
        start_server, make_repo, f"127.0.0.1:{collector.port}/v1/traces",
        "--trace-config", "rate=0",
    )
    a = np.ones((1, 4), dtype=np.float32)
    with srv.http_client() as client:
        client.infer("add_sub", add_sub_inputs(httpclient, a, a))
        http_ctx, http_headers = client_context()
        client.infer("add_sub", add_sub_inputs(httpclient, a, a), headers=http_headers)
    grpc_ctx, grpc_headers = client_context()
    srv.grpc_client().infer("add_sub", add_sub_inputs(grpcclient, a, a), headers=grpc_headers)

    for ctx in (http_ctx, grpc_ctx):
        trace_id = ctx.trace_id.to_bytes(16, "big")
        spans = collector.trace(trace_id, 3)
        root = next(s for s in spans if s.name == "InferRequest")
        assert root.parent_span_id == ctx.span_id.to_bytes(8, "big")
        assert root.trace_state == "vendor=abc"
    # The request without a context was not traced: two traces, six spans in all.
    time.sleep(0.3)
    assert len(collector.spans()) == 6
    assert len(roots(collector)) == 2


def dropped(srv, reason):
    for family in text_string_to_metric_families(srv.metrics()):
        if family.name == "nereid_trace_spans_dropped":
            for sample in family.samples:
                if sample.labels.get("reason") == reason:
                    return sample.value
    raise AssertionError("nereid_trace_spans_dropped_total not exported")


def test_a_stuck_collector_costs_requests_nothing_and_drops_are_counted(
    start_server, make_repo
):
    # A collector that accepts connections (the kernel's backlog) and never answers.
    stuck = socket.socket()
    stuck.bind(("127.0.0.1", 0))
    stuck.listen(64)
    try:
        srv = otel_server(
            start_server, make_repo, f"127.0.0.1:{stuck.getsockname()[1]}/v1/traces",
            "--trace-config", "rate=1",
            "--trace-config", "opentelemetry,bsp_max_queue_size=6",
            "--trace-config", "opentelemetry,bsp_max_export_batch_size=3",
            env={"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "3000"},
        )
        a = np.ones((1, 4), dtype=np.float32)
        with srv.http_client() as client:
            for _ in range(20):
                started = time.monotonic()
                result = client.infer("add_sub", add_sub_inputs(httpclient, a, a))
                assert time.monotonic() - started < 1.0
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
        # 20 traces of 3 spans; the queue holds 6 and the stuck export one batch at a
        # time, so most traces are dropped whole.
        lost = dropped(srv, "queue_full")
        assert lost >= 30 and lost % 3 == 0, lost
        assert srv.wait_exit(0.1) is None, "still serving"
        assert srv.log().count("OpenTelemetry export queue full") == 1
    finally:
        stuck.close()


def test_a_dead_collector_is_logged_once_and_counted(start_server, make_repo):
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()  # nothing listens: connections are refused
    srv = otel_server(
        start_server, make_repo, f"127.0.0.1:{port}/v1/traces", "--trace-config", "rate=1"
    )
    a = np.ones((1, 4), dtype=np.float32)
    with srv.http_client() as client:
        for _ in range(5):
            client.infer("add_sub", add_sub_inputs(httpclient, a, a))
    wait_for(lambda: dropped(srv, "export_failed") == 15, timeout=15, what="15 failed spans")
    assert srv.log().count("OpenTelemetry export failed") == 1


@pytest.mark.parametrize(
    "setting, message",
    [
        ("opentelemetry,bsp_max_queue_size=0", "bsp_max_queue_size=0"),
        ("opentelemetry,colour=red", "unknown opentelemetry trace setting 'colour'"),
        ("opentelemetry,url=https://collector:4318", "no TLS"),
    ],
)
def test_bad_opentelemetry_settings_stop_start_up(start_server, make_repo, setting, message):
    repo = make_repo(["add_sub"])
    srv = start_server(
        repo,
        "--trace-config", "mode=opentelemetry",
        "--trace-config", setting,
        wait=False,
    )
    assert srv.wait_exit(15) not in (None, 0)
    assert message in srv.log()


def test_stream_requests_continue_the_streams_context(collector, start_server, make_repo):
    srv = otel_server(
        start_server, make_repo, f"127.0.0.1:{collector.port}/v1/traces",
        "--trace-config", "rate=0",
    )
    ctx, headers = client_context()
    answers = []
    done = threading.Event()

    def callback(result, error):
        answers.append(error or result)
        if len(answers) == 2:
            done.set()

    client = srv.grpc_client()
    client.start_stream(callback, headers=headers)
    a = np.ones((1, 4), dtype=np.float32)
    for _ in range(2):
        client.async_stream_infer("add_sub", add_sub_inputs(grpcclient, a, a))
    assert done.wait(15)
    client.stop_stream()
    assert not any(isinstance(x, Exception) for x in answers), answers

    # Each request of the stream is its own trace tree under the client's span.
    spans = collector.trace(ctx.trace_id.to_bytes(16, "big"), 6)
    stream_roots = [s for s in spans if s.name == "InferRequest"]
    assert len(stream_roots) == 2
    for root in stream_roots:
        assert root.parent_span_id == ctx.span_id.to_bytes(8, "big")
        assert events(root) == GRPC_ROOT_EVENTS
    check_nesting(spans)
