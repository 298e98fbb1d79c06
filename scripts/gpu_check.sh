#!/usr/bin/env bash
# CUDA shared memory, GPU metrics and models executing on a real GPU, in one run of the
# device machine (which has CUDA 13, python3 with PyTorch 2.11 (cu130), numpy, onnx,
# onnxruntime, cuda-bindings and pytest, but no network and no Rust).
#
# Usage:
#   scripts/gpu_check.sh prepare CLIENT_REPO   here: fills .gpu/ (git-ignored, about
#       50 MB) with nereid (stripped, xz), the example models, tritonclient's two CUDA
#       shm examples from CLIENT_REPO (a clone of triton-inference-server/client, bare or
#       not) and the wheels tritonclient needs; Triton's pytorch backend built for the
#       GPU against the device's PyTorch (scripts/build_pytorch_backend.sh --gpu) and
#       Triton 2.51's python backend (GPU build, from the nvidia-pytriton wheel) with the
#       libraries it loads, in backends.tar.xz; numpy < 2 for the python backend's stub
#       (pybind11 2.10) and a libpython3.12 for a device without one. Then call the
#       device tool with carry [".gpu"] and `bash scripts/gpu_check.sh run`.
#   scripts/gpu_check.sh run                   there: makes the GPU model repository
#       (tests/gpu/make_gpu_models.py, with the device's PyTorch), starts nereid with
#       --allow-client-shm=true over both repositories and runs, writing each result
#       under $OUT:
#       1. tritonclient's simple_http_cudashm_client.py and simple_grpc_cudashm_client.py
#       2. tests/gpu/test_cuda_shm_device.py (device memory at offsets, status, size and
#          device checks, a bad handle, out-of-region reads and writes, a region freed
#          by its owner), over HTTP and gRPC
#       3. tests/gpu/shm_latency.py: a 4 MiB tensor in the body vs system vs CUDA shm
#       4. /metrics: the six GPU families, beside nvidia-smi's readings
#       5. tests/gpu/test_gpu_models.py: KIND_GPU instances placed on GPU 0, TorchScript
#          on the GPU over HTTP and gRPC, a python model answering with GPU tensors
#          through DLPack (its tensors pass through nereid's CUDA memory pool), CUDA shm
#          in and out of a GPU model, the GPU and CPU instances of one model agreeing
#       6. tests/gpu/gpu_vs_cpu.py: that model's GPU and CPU instances side by side
#       Exit status 0 when every step passed; summary.txt says which did not. $OUT
#       holds 8 files at most: summary.txt, nvidia-smi.txt, nereid.log, examples.log,
#       pytest.log, latency.json, metrics.txt, gpu_vs_cpu.json.

set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
GPU=$ROOT/.gpu

prepare() {
  local client=${1:?usage: gpu_check.sh prepare CLIENT_REPO}
  rm -rf "$GPU"
  mkdir -p "$GPU/examples" "$GPU/whl" "$GPU/stubwhl"
  cargo build --profile suite -p nereid-server || exit 1
  # Stripped and compressed: the carried tree is at most 64 MiB.
  strip -o "$GPU/nereid" target/suite/nereid && xz -T0 -6 "$GPU/nereid" || exit 1
  "$ROOT/.venv/bin/python" scripts/make_triton_examples.py "$GPU/models" >/dev/null || exit 1
  for example in simple_http_cudashm_client.py simple_grpc_cudashm_client.py; do
    git -C "$client" show "HEAD:src/python/examples/$example" >"$GPU/examples/$example" || exit 1
  done
  # tritonclient and what its HTTP client imports, for the device's Python 3.12.
  local wanted="tritonclient==2.73.0 python-rapidjson geventhttpclient gevent greenlet
    zope.event zope.interface brotli"
  for package in $wanted; do
    download_312 "$GPU/whl" "$package" || exit 1
  done
  download_312 "$GPU/stubwhl" numpy==1.26.4 || exit 1
  local backends=${NEREID_GPU_BACKENDS:-/var/cache/nereid/backends-gpu}
  scripts/build_pytorch_backend.sh "$backends" --gpu || exit 1
  local staging=$GPU/staging
  python3 scripts/gpu_python_backend.py "$staging" || exit 1
  mkdir -p "$staging/pytriton/tritonserver/backends/pytorch"
  cp "$backends/pytorch/libtriton_pytorch.so" "$staging/pytriton/tritonserver/backends/pytorch/"
  tar -C "$staging" -cJf "$GPU/backends.tar.xz" . && rm -rf "$staging" || exit 1
  xz -T0 -6 -c "${NEREID_PY312:-/root/.pyenv/versions/3.12.1}/lib/libpython3.12.so.1.0" \
    >"$GPU/libpython3.12.so.1.0.xz" || exit 1
  du -sh "$GPU"
}

# download_312 DIR PACKAGE: PACKAGE's wheel for the device's Python 3.12 into DIR.
download_312() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform any -d "$1" "$2"
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

  # nereid, the backends and the GPU models, unpacked and made here.
  local work=/tmp/nereid-gpu
  rm -rf "$work" && mkdir -p "$work/pylib" || exit 1
  xz -dc "$GPU/nereid.xz" >"$work/nereid" && chmod +x "$work/nereid" || exit 1
  tar -C "$work" -xJf "$GPU/backends.tar.xz" || exit 1
  local backends=$work/pytriton/tritonserver/backends torch_libs
  # The pytorch backend loads the device's torch and its CUDA 13 libraries: linked
  # beside it, as in Triton's image.
  torch_libs=$(python3 -c 'import glob, os, torch
site = os.path.dirname(os.path.dirname(torch.__file__))
print(" ".join([os.path.join(site, "torch", "lib")] + glob.glob(os.path.join(site, "nvidia", "*", "lib"))))')
  for dir in $torch_libs; do ln -sf "$dir"/*.so* "$backends/pytorch/"; done
  echo "torch $(python3 -c 'import torch; print(torch.__version__)') from $torch_libs" >>"$summary"
  # The python backend's stub embeds Python in isolated mode: it finds its packages
  # through the first python3 on PATH, never PYTHONPATH. A venv of the device's Python
  # holds numpy < 2 (under numpy 2 the stub's pybind11 2.10 answers with empty tensors),
  # and a .pth adds the device's own packages (torch) after it; only nereid runs with it
  # first on PATH. libpython3.12 comes from the device's Python, else the one carried.
  local stub_venv=$work/stub-venv site
  python3 -m venv --without-pip "$stub_venv" || exit 1
  site=$("$stub_venv/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target "$site" "$GPU"/stubwhl/*.whl || exit 1
  python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$site/device-python.pth"
  local pylib
  pylib=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')
  if [ ! -e "$pylib/libpython3.12.so.1.0" ] && ! ldconfig -p | grep -q 'libpython3.12.so.1.0 '; then
    xz -dc "$GPU/libpython3.12.so.1.0.xz" >"$work/pylib/libpython3.12.so.1.0"
    pylib=$work/pylib
  fi
  echo "stub: libpython3.12 from ${pylib:-the system}, numpy 1.26.4 from $stub_venv" >>"$summary"
  python3 tests/gpu/make_gpu_models.py "$work/gpu_models" || exit 1
  smi_readings

  PATH="$stub_venv/bin:$PATH" LD_LIBRARY_PATH="$pylib:${LD_LIBRARY_PATH:-}" \
    "$work/nereid" --model-repository "$GPU/models/model_repository" \
    --model-repository "$GPU/models/identity_extra" --model-repository "$work/gpu_models" \
    --backend-directory "$backends" --exit-on-error=false --strict-readiness=false \
    --allow-client-shm=true --metrics-interval-ms=500 >"$out/nereid.log" 2>&1 &
  local server=$!
  local ready=1
  for _ in $(seq 1 240); do
    if python3 -c 'import urllib.request as u; u.urlopen("http://localhost:8000/v2/health/ready", timeout=1)' 2>/dev/null; then
      ready=0
      break
    fi
    sleep 0.5
  done
  step "server ready" $ready
  [ $ready = 0 ] || { kill $server; return 1; }
  # A model that failed to load fails this step, not the run: the others go on.
  python3 - >>"$summary" 2>&1 <<'EOF'
import json, sys, urllib.request
request = urllib.request.Request("http://localhost:8000/v2/repository/index", data=b"{}")
index = json.load(urllib.request.urlopen(request, timeout=5))
unready = [(m["name"], m.get("state"), m.get("reason", "")) for m in index if m.get("state") != "READY"]
for name, state, reason in unready:
    print(f"model {name}: {state} {reason}")
sys.exit(1 if unready else 0)
EOF
  step "every model loaded" $?
  # The GPU models hold GPU memory in nereid's process and the python backend's stub.
  smi_readings
  {
    echo "compute processes (nereid is $server):"
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
  } >>"$out/nvidia-smi.txt" 2>&1
  nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -qw "$server"
  step "nvidia-smi lists nereid" $?

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

  NEREID_LOG=$out/nereid.log timeout 300 python3 -m pytest -q -p no:cacheprovider \
    tests/gpu/test_gpu_models.py >>"$out/pytest.log" 2>&1
  step "test_gpu_models.py" $?
  tail -3 "$out/pytest.log" >>"$summary"
  (cd tests/gpu && timeout 240 python3 gpu_vs_cpu.py) >"$out/gpu_vs_cpu.json" 2>>"$out/examples.log"
  step "gpu_vs_cpu.py" $?
  echo "CUDA memory pool: $(grep -o 'CUDA memory pool is created.*' "$out/nereid.log" | head -1)" >>"$summary"

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
