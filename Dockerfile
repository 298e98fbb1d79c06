# Nereid as a drop-in for Triton's container image: `tritonserver` is on PATH, so
# `docker run IMAGE tritonserver --model-repository=...` and KServe's tritonserver
# runtime arguments replace CMD and work unchanged (there is no ENTRYPOINT to swallow
# them). The runtime stage holds only the nereid binary and ONNX Runtime's library.
# deploy/image/build-offline.sh builds the same filesystem and configuration from
# Debian packages where no registry is reachable: change both together.

FROM rust:1.95-bookworm AS builder
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p nereid-server

# nereid loads libonnxruntime at run time; take it from the wheel requirements.txt pins,
# the same one the tests run against.
FROM python:3.11-slim-bookworm AS onnxruntime
COPY requirements.txt /tmp/requirements.txt
RUN pip install --no-cache-dir --no-deps --target /ort \
        "$(grep -E '^onnxruntime[<>=]' /tmp/requirements.txt)" \
 && cp /ort/onnxruntime/capi/libonnxruntime.so.* /libonnxruntime.so

FROM debian:bookworm-slim
# uid 1000, as in Triton's image and KServe's runtimes (runAsUser: 1000).
RUN useradd --uid 1000 --user-group --create-home --shell /usr/sbin/nologin nereid \
 && ln -s nereid /usr/local/bin/tritonserver
COPY --from=builder /src/target/release/nereid /usr/local/bin/nereid
COPY --from=onnxruntime /libonnxruntime.so /usr/local/lib/libonnxruntime.so
ENV ORT_DYLIB_PATH=/usr/local/lib/libonnxruntime.so
LABEL org.opencontainers.image.title="nereid" \
      org.opencontainers.image.description="Inference server for Triton model repositories: KServe v2 HTTP and gRPC, ONNX Runtime" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 1000:1000
EXPOSE 8000 8001 8002
# bash's /dev/tcp makes the request, so the image needs no curl. It checks the default
# HTTP port: a container started on another port (KServe's 8080) reports unhealthy here,
# which Kubernetes ignores (it runs its own probes).
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8000 && printf \"GET /v2/health/ready HTTP/1.0\\r\\n\\r\\n\" >&3 && read -r _ status _ <&3 && [ \"$status\" = 200 ]"]
CMD ["tritonserver", "--model-repository=/models"]
