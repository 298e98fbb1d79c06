#!/usr/bin/env bash
# CUDA shared memory and GPU metrics on a real GPU, in one run of the device machine
# (which has CUDA, python3 with numpy, onnx, onnxruntime, cuda-bindings and pytest, but
# no network and no Rust).
#
# Usage:
#   scripts/gpu_check.sh prepare CLIENT_REPO   here: fills .gpu/ (git-ignored) with the
#       release nereid, the example models, tritonclient's two CUDA shm examples from
#       CLIENT_REPO (a clone of triton-inference-server/client, bare or not) and the wheels
#       tritonclient needs; then call the device tool with carry [".gpu"] and
#       `bash scripts/gpu_check.sh run`.
#   scripts/gpu_check.sh run                   there: starts nereid with
#       --allow-client-shm=true and runs, writing each result under $OUT:
#       1. tritonclient's simple_http_cudashm_client.py and simple_grpc_cudashm_client.py
#       2. tests/gpu/test_cuda_shm_device.py (device memory at offsets, status, size and
#          device checks, a bad handle, out-of-region reads and writes, a region freed
#          by its owner), over HTTP and gRPC
#       3. tests/gpu/shm_latency.py: a 4 MiB tensor in the body vs system vs CUDA shm
#       4. /metrics: the six GPU families, beside nvidia-smi's readings
#       Exit status 0 when every step passed; summary.txt says which did not.

set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
GPU=$ROOT/.gpu

prepare() {
  local client=${1:?usage: gpu_check.sh prepare CLIENT_REPO}
  mkdir -p "$GPU/examples" "$GPU/whl"
  cargo build --release -p nereid-server || exit 1
  cp target/release/nereid "$GPU/nereid"
  strip "$GPU/nereid"
  "$ROOT/.venv/bin/python" scripts/make_triton_examples.py "$GPU/models" >/dev/null || exit 1
  for example in simple_http_cudashm_client.py simple_grpc_cudashm_client.py; do
    git -C "$client" show "HEAD:src/python/examples/$example" >"$GPU/examples/$example" || exit 1
  done
  # tritonclient and what its HTTP client imports, for the device's Python 3.12.
  local wanted="tritonclient==2.73.0 python-rapidjson geventhttpclient gevent greenlet
    zope.event zope.interface brotli"
  for package in $wanted; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      --platform manylinux1_x86_64 --platform any -d "$GPU/whl" "$package" || exit 1
  done
  du -sh "$GPU"
}

run() {
  local out=${OUT:-/tmp/gpu_check}
  mkdir -p "$out"
  local summary=$out/summary.txt failed=0
  : >"$summary"
  step() { # step NAME STATUS
    printf '%-28s %s\n' "$1" "$([ "$2" = 0 ] && echo PASS || echo "FAIL ($2)")" | tee -a "$summary"
    [ "$2" = 0 ] || failed=1
  }
  {
    date -u
    nvidia-smi -L
  } >"$out/nvidia-smi.txt" 2>&1
  smi_readings() {
    nvidia-smi --query-gpu=timestamp,uuid,utilization.gpu,memory.total,memory.used,power.draw,power.limit \
      --format=csv,nounits >>"$out/nvidia-smi.txt" 2>&1
  }
  smi_readings
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$GPU"/whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
  ORT_DYLIB_PATH=$(python3 -c 'import glob, os, onnxruntime as o; print(sorted(glob.glob(os.path.join(os.path.dirname(o.__file__), "capi", "libonnxruntime.so*")))[-1])')
  export ORT_DYLIB_PATH
  echo "ONNX Runtime: $ORT_DYLIB_PATH" >>"$summary"

  "$GPU/nereid" --model-repository "$GPU/models/model_repository" \
    --model-repository "$GPU/models/identity_extra" \
    --allow-client-shm=true --metrics-interval-ms=500 >"$out/nereid.log" 2>&1 &
  local server=$!
  local ready=1
  for _ in $(seq 1 120); do
    if python3 -c 'import urllib.request as u; u.urlopen("http://localhost:8000/v2/health/ready", timeout=1)' 2>/dev/null; then
      ready=0
      break
    fi
    sleep 0.5
  done
  step "server ready" $ready
  [ $ready = 0 ] || { kill $server; return 1; }

  : >"$out/examples.log"
  for example in simple_http_cudashm_client.py simple_grpc_cudashm_client.py; do
    timeout 120 python3 "$GPU/examples/$example" >"$out/example.txt" 2>&1
    local status=$?
    # The examples print "PASS: ..." last on success.
    if [ $status = 0 ] && ! grep -q "^PASS: " "$out/example.txt"; then
      status=9
    fi
    { echo "== $example"; cat "$out/example.txt"; } >>"$out/examples.log"
    rm "$out/example.txt"
    step "$example" $status
  done

  timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_cuda_shm_device.py \
    >"$out/pytest.log" 2>&1
  step "test_cuda_shm_device.py" $?
  tail -3 "$out/pytest.log" >>"$summary"

  timeout 300 python3 tests/gpu/shm_latency.py >"$out/latency.json" 2>>"$out/examples.log"
  step "shm_latency.py (4 MiB)" $?

  # Keep the GPU busy (matrix products through PyTorch) while the metrics are read.
  python3 -c '
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda")
a @ a
torch.cuda.synchronize()
open(sys.argv[1], "w").close()
end = time.time() + 5
while time.time() < end:
    a @ a
    torch.cuda.synchronize()
' "$out/busy" &
  local load=$!
  for _ in $(seq 1 120); do [ -e "$out/busy" ] && break; sleep 0.25; done
  rm -f "$out/busy"
  python3 - "$out" <<'EOF' >>"$summary" 2>&1
import re, sys, time, urllib.request
out = sys.argv[1]
time.sleep(2)  # several polls have seen the load
text = urllib.request.urlopen("http://localhost:8002/metrics", timeout=5).read().decode()
open(f"{out}/metrics.txt", "w").write(text)
families = ["nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes",
            "nv_gpu_power_usage", "nv_gpu_power_limit", "nv_energy_consumption"]
ok = True
for family in families:
    rows = re.findall(rf'^{family}\{{gpu_uuid="(GPU-[^"]+)"\}} (\S+)$', text, re.M)
    print(f"{family}: {rows}")
    ok &= bool(rows)
total = dict(re.findall(r'^nv_gpu_memory_total_bytes\{gpu_uuid="([^"]+)"\} (\S+)$', text, re.M))
limit = dict(re.findall(r'^nv_gpu_power_limit\{gpu_uuid="([^"]+)"\} (\S+)$', text, re.M))
used = dict(re.findall(r'^nv_gpu_memory_used_bytes\{gpu_uuid="([^"]+)"\} (\S+)$', text, re.M))
ok &= all(float(v) > 1 << 30 for v in total.values()) and all(float(v) > 50 for v in limit.values())
# The same readings from nvidia-smi: totals and limits equal, used memory within 64 MiB.
import subprocess
smi = subprocess.run(["nvidia-smi", "--query-gpu=uuid,memory.total,memory.used,power.limit",
                      "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
for line in smi.strip().splitlines():
    uuid, smi_total, smi_used, smi_limit = [f.strip() for f in line.split(",")]
    mib = 1 << 20
    agree = (abs(float(total[uuid]) / mib - float(smi_total)) < 1
             and abs(float(used[uuid]) / mib - float(smi_used)) < 64
             and abs(float(limit[uuid]) - float(smi_limit)) < 1)
    print(f"nvidia-smi {uuid}: total {smi_total} MiB, used {smi_used} MiB, limit {smi_limit} W:",
          "agrees" if agree else "DISAGREES")
    ok &= agree
busy = dict(re.findall(r'^nv_gpu_utilization\{gpu_uuid="([^"]+)"\} (\S+)$', text, re.M))
print("utilization under load:", busy)
ok &= all(float(v) >= 0.2 for v in busy.values())
sys.exit(0 if ok else 1)
EOF
  step "GPU metric families" $?
  wait $load
  smi_readings

  kill $server
  wait $server 2>/dev/null
  cat "$summary"
  return $failed
}

case "${1:-}" in
  prepare) shift; prepare "$@" ;;
  run) run ;;
  *) sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
