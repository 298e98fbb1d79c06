"""GPU metrics (Triton's nv_gpu_* families and nv_energy_consumption) through the
real binary, whose NVML is `fake_nvml/fake_nvml.c`, a test double loaded through
NEREID_NVML_LIBRARY: the values each fake GPU reports must reach /metrics under
Triton's names, help texts and `gpu_uuid` labels; CUDA_VISIBLE_DEVICES and
--allow-gpu-metrics=false narrow or remove them; without a usable NVML the server
exports no GPU family, says why once, and serves. A real GPU is checked by
scripts/gpu_check.sh on the device machine.
"""

import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import EXAMPLE_MODELS

HERE = os.path.dirname(os.path.abspath(__file__))
FAMILIES = {
    "nv_gpu_utilization": ("GPU utilization rate [0.0 - 1.0)", "gauge"),
    "nv_gpu_memory_total_bytes": ("GPU total memory, in bytes", "gauge"),
    "nv_gpu_memory_used_bytes": ("GPU used memory, in bytes", "gauge"),
    "nv_gpu_power_usage": ("GPU power usage in watts", "gauge"),
    "nv_gpu_power_limit": ("GPU power management limit in watts", "gauge"),
    "nv_energy_consumption": (
        "GPU energy consumption in joules since the Triton Server started",
        "counter",
    ),
}


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory):
    gcc = shutil.which("gcc") or shutil.which("cc")
    assert gcc, "a C compiler is needed to build the NVML test double"
    lib = tmp_path_factory.mktemp("fake_nvml") / "libfakenvml.so"
    source = os.path.join(HERE, "fake_nvml", "fake_nvml.c")
    subprocess.run([gcc, "-shared", "-fPIC", "-O1", "-o", str(lib), source], check=True)
    return str(lib)


def series(text):
    """{(family, gpu_uuid): value} of the GPU families in a scrape."""
    found = {}
    for name, uuid, value in re.findall(r'^(nv_\w+)\{gpu_uuid="([^"]+)"\} (\S+)$', text, re.M):
        found[(name, uuid)] = float(value)
    return found


def test_each_fake_gpu_reading_reaches_metrics(start_server, fake_nvml):
    srv = start_server(
        EXAMPLE_MODELS,
        "--metrics-interval-ms=100",
        env={"NEREID_NVML_LIBRARY": fake_nvml, "FAKE_NVML_DEVICES": "2"},
    )
    text = srv.metrics()
    for name, (help_text, kind) in FAMILIES.items():
        assert f"# HELP {name} {help_text}\n" in text, text
        assert f"# TYPE {name} {kind}\n" in text, text
    got = series(text)
    gib = 1 << 30
    for i, uuid in enumerate(["GPU-fake-0000", "GPU-fake-0001"]):
        assert got[("nv_gpu_utilization", uuid)] == pytest.approx((37 + i) / 100)
        assert got[("nv_gpu_memory_total_bytes", uuid)] == 80 * gib
        assert got[("nv_gpu_memory_used_bytes", uuid)] == (i + 1) * gib
        assert got[("nv_gpu_power_limit", uuid)] == 700
    assert got[("nv_gpu_power_usage", "GPU-fake-0000")] == pytest.approx(71.234)
    # Device 1 cannot read its power: the series stays at 0 and the reason is logged once.
    assert got[("nv_gpu_power_usage", "GPU-fake-0001")] == 0
    assert len(got) == 12, got
    # Each poll adds 1 J; the counter started at 0 with the server.
    first = got[("nv_energy_consumption", "GPU-fake-0000")]
    time.sleep(0.5)
    later = series(srv.metrics())[("nv_energy_consumption", "GPU-fake-0000")]
    assert later >= first + 2, (first, later)
    assert later == int(later), "whole joules: 1000 mJ per poll"
    log = srv.log()
    assert log.count("unable to read the power usage of GPU GPU-fake-0001") == 1, log
    assert "Not Supported" in log


def test_cuda_visible_devices_narrows_the_gpus(start_server, fake_nvml):
    srv = start_server(
        EXAMPLE_MODELS,
        env={
            "NEREID_NVML_LIBRARY": fake_nvml,
            "FAKE_NVML_DEVICES": "3",
            "CUDA_VISIBLE_DEVICES": "GPU-fake-0002,7,0",
        },
    )
    uuids = {uuid for (_, uuid) in series(srv.metrics())}
    # The list ends at 7, which names no device, as CUDA reads it.
    assert uuids == {"GPU-fake-0002"}


@pytest.mark.parametrize(
    "why,args,env",
    [
        ("disabled", ["--allow-gpu-metrics=false"], {}),
        ("no library", [], {"NEREID_NVML_LIBRARY": "/nonexistent/libnvidia-ml.so.1"}),
        ("init fails", [], {"FAKE_NVML_INIT_FAILS": "1"}),
        ("no gpu", [], {"FAKE_NVML_DEVICES": "0"}),
    ],
)
def test_no_gpu_families_without_a_usable_gpu(start_server, fake_nvml, why, args, env):
    srv = start_server(EXAMPLE_MODELS, *args, env={"NEREID_NVML_LIBRARY": fake_nvml, **env})
    deadline = time.monotonic() + 10
    # The CPU gauges appear with the first poll, just after start-up.
    while "nv_cpu_utilization" not in (text := srv.metrics()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "nv_cpu_utilization" in text, "the CPU gauges stay"
    assert "nv_gpu_" not in text and "nv_energy" not in text, text
    log = srv.log()
    if why == "disabled":
        assert "GPU metrics" not in log, log
    elif why == "no gpu":
        assert "NVML shows no GPU" in log, log
    else:
        assert "GPU metrics unavailable: NVML could not be used" in log, log
    assert srv.request("GET", "/v2/health/ready").status == 200
