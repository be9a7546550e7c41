"""The meter against a real GPU: attribution to processes within 1 % of nvidia-smi, and peaks kept."""

from __future__ import annotations

import os
from pathlib import Path

import pynvml
import pytest

from fracnb_meter.attribution import attribute, find_owners
from fracnb_meter.nvml import read_devices
from fracnb_meter.processes import parent_pid
from fracnb_meter.sessionstats import Reading, SessionStats
from fracnb_meter.testing.server import start_server
from fracnb_testbed.procs import wait_until
from tests.gpu.conftest import smi_memory_by_pid

MIB = 1 << 20


@pytest.fixture
def nvml():
    pynvml.nvmlInit()
    yield pynvml
    pynvml.nvmlShutdown()


def test_two_processes_are_attributed_as_nvidia_smi_reports(nvml, hold_gpu_memory) -> None:
    small, large = hold_gpu_memory(256), hold_gpu_memory(1024)
    reading = read_devices(nvml)
    smi = smi_memory_by_pid()
    by_pid = {process.pid: process.memory_bytes for process in reading.processes}
    for process in (small, large):
        assert by_pid[process.pid] is not None
        assert by_pid[process.pid] == pytest.approx(smi[process.pid], rel=0.01)
    assert by_pid[large.pid] - by_pid[small.pid] == pytest.approx(768 * MIB, rel=0.01)
    # Both processes are children of this one: attributed to it as "kernels" of a server.
    kernel_pids = {small.pid, large.pid}
    owners = find_owners({p.pid for p in reading.processes}, kernel_pids, os.getpid(), parent_pid)
    result = attribute(
        processes=reading.processes,
        device_used_bytes=sum(gpu.memory_used_bytes for gpu in reading.gpus),
        owners=owners,
        kernel_pids=kernel_pids,
        per_process=True,
        devices_are_ours=False,
    )
    for process in (small, large):
        assert result.per_kernel[process.pid] == pytest.approx(smi[process.pid], rel=0.01)


def test_peaks_are_recorded_from_real_readings(nvml, hold_gpu_memory) -> None:
    stats = SessionStats(budget_bytes=None)
    held = hold_gpu_memory(512)
    smi = smi_memory_by_pid()[held.pid]
    reading = read_devices(nvml)
    stats.observe(Reading(0, sum(p.memory_bytes or 0 for p in reading.processes if p.pid == held.pid)))
    held.stdin.close()
    held.wait(30)
    after = read_devices(nvml)
    stats.observe(Reading(1, sum(p.memory_bytes or 0 for p in after.processes if p.pid == held.pid)))
    assert stats.peak_bytes == pytest.approx(smi, rel=0.01)
    assert stats.peak_bytes >= 512 * MIB


def test_the_meter_server_reports_a_kernels_memory_and_keeps_its_peak(tmp_path: Path) -> None:
    server = start_server(tmp_path, None, None, meter_config={"sample_interval_floor": 0.0, "in_container": False})
    try:
        kernel_id = server.start_session("gpu.ipynb")
        client = server.client(kernel_id)
        code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import cuda_alloc; held = cuda_alloc.allocate(384)"
        reply = client.execute_interactive(code, timeout=120)
        assert reply["content"]["status"] == "ok", reply["content"]

        def kernel_memory() -> int | None:
            return next(k for k in server.usage()["kernels"] if k["id"] == kernel_id)["gpu_memory_bytes"]

        wait_until(lambda: (kernel_memory() or 0) >= 384 * MIB, what="the kernel's GPU memory", timeout=60)
        pid = next(k for k in server.usage()["kernels"] if k["id"] == kernel_id)["pid"]
        assert kernel_memory() == pytest.approx(smi_memory_by_pid()[pid], rel=0.01)
        client.execute_interactive("del held", timeout=60)
        status, session = server.request("fracnb/api/session")
        assert status == 200
        assert session["kernels"][0]["peak_bytes"] >= 384 * MIB
    finally:
        server.stop()
