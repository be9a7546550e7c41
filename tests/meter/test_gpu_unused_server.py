"""GPU-unused time per kernel, measured by a real jupyter server from the fake NVML's utilisation samples.

Real kernels hold simulated GPU memory; the fake libnvidia-ml gives per-process utilisation samples on
its sampling ticks, in its bounded ring, as the driver does, and the real pynvml reads them. The
windows are 1 s here instead of 30 s (``gpu_unused_window``) so that a test waits seconds, not
minutes; the rules are the same. The hub's side is the report stand-in of tests/service_reports.py,
which checks every session report against its schema (gpu_unused included).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from traitlets import TraitError

from fracnb_meter.server import FracnbMeter
from fracnb_meter.testing.fakenvml import FakeDevice, FakeMig, FakeProcess, FakeState, FakeUtilization, epoch_us
from fracnb_meter.testing.server import MeterServer, StateFile, start_server
from fracnb_testbed.procs import wait_until
from tests.meter.meter_helpers import GIB, QUARTER_CONTRACT, evaluate
from tests.service_reports import ReportServer

WINDOW = 1
DRIVER = "570.86.15"  # the first driver that gives a container's own pids in utilisation samples


@pytest.fixture(scope="module")
def server(fake_nvml_library: Path, tmp_path_factory: pytest.TempPathFactory, service: ReportServer
           ) -> Iterator[MeterServer]:  # fmt: skip
    tmp_path = tmp_path_factory.mktemp("gpu-unused")
    state = StateFile(tmp_path / "nvml-state")
    state.write(FakeState(driver_version=DRIVER, devices=[FakeDevice.a100(0)]))
    config = {
        "sample_interval_floor": 0.0,
        "activity_interval": 0,
        "history_interval": 0,
        "in_container": True,
        "gpu_unused_window": WINDOW,
        "gpu_unused_interval": 0.25,
        "session_report_interval": 0.5,
    }
    server = start_server(tmp_path, fake_nvml_library, state, meter_config=config,
                          extra_env={**QUARTER_CONTRACT, **service.environment()})  # fmt: skip
    yield server
    server.stop()


def write(server: MeterServer, *, driver: str = DRIVER, devices: list[FakeDevice] | None = None, **state: Any) -> None:
    assert server.state is not None
    server.state.write(FakeState(driver_version=driver, devices=devices or [FakeDevice.a100(0)], **state))


def kernel_unused(server: MeterServer, kernel_id: str) -> dict[str, Any]:
    (kernel,) = [k for k in server.usage()["kernels"] if k["id"] == kernel_id]
    return kernel["gpu_unused"]


def unused_at_least(server: MeterServer, kernel_id: str, seconds: int) -> bool:
    found = kernel_unused(server, kernel_id)["seconds"]
    return found is not None and found >= seconds


def start_kernel(server: MeterServer, notebook: str) -> tuple[str, int]:
    kernel_id = server.start_session(notebook)
    return kernel_id, int(evaluate(server.client(kernel_id), "os.getpid()", "import os"))


def latest_report(service: ReportServer) -> dict[str, Any]:
    return service.sessions[-1] if service.sessions else {}


def test_an_idle_kernel_holding_memory_counts_unused_windows_until_its_child_works(
    server: MeterServer, service: ReportServer
) -> None:
    idle_id, idle_pid = start_kernel(server, "idle.ipynb")
    train_id, train_pid = start_kernel(server, "train.ipynb")
    train = server.client(train_id)
    # A DataLoader-like worker: the kernel's child process does the GPU work.
    worker = int(evaluate(train, "worker.pid", "import subprocess; worker = subprocess.Popen(['sleep', '600'])"))
    try:
        held = [FakeProcess(0, idle_pid, 4 * GIB), FakeProcess(0, train_pid, 2 * GIB)]
        write(server, processes=held)
        wait_until(lambda: unused_at_least(server, idle_id, 3 * WINDOW), what="3 unused windows", timeout=30)
        wait_until(lambda: unused_at_least(server, train_id, WINDOW), what="the other kernel's count", timeout=30)

        def reported() -> bool:
            report = latest_report(service).get("gpu_unused") or {}
            return report.get("gpu_memory_bytes") == 6 * GIB and (report.get("seconds") or 0) >= 2 * WINDOW

        wait_until(reported, what="the hub's report of the unused GPU and the memory held", timeout=30)
        report = latest_report(service)["gpu_unused"]
        assert (report["busy_kernels"], report["window_seconds"], report["reason"]) == (0, WINDOW, None)

        write(server, processes=held, utilization=[FakeUtilization(0, worker, 80)])
        wait_until(lambda: kernel_unused(server, train_id)["seconds"] == 0, what="the work to reset", timeout=30)
        document = server.usage()
        assert document["gpu_unused"]["seconds"] == 0  # the server's GPU is in use
        (idle,) = [k for k in document["kernels"] if k["id"] == idle_id]
        assert idle["gpu_unused"]["seconds"] >= 3 * WINDOW  # another kernel's work is not this one's

        write(server, processes=held, utilization=[FakeUtilization(0, worker, 80, end_us=epoch_us())])
        wait_until(lambda: unused_at_least(server, train_id, WINDOW), what="unused again", timeout=30)
    finally:
        evaluate(train, "worker.kill()")


def test_a_kernel_busy_on_the_cpu_is_reported_busy_with_its_gpu_unused(
    server: MeterServer, service: ReportServer
) -> None:
    kernel_id, pid = start_kernel(server, "cpu-bound.ipynb")
    write(server, processes=[FakeProcess(0, pid, 18 * GIB)])
    client = server.client(kernel_id)
    client.execute("import time; time.sleep(600)")
    try:

        def busy_and_unused() -> bool:
            report = latest_report(service).get("gpu_unused") or {}
            return report.get("busy_kernels") == 1 and (report.get("seconds") or 0) >= 2 * WINDOW

        wait_until(busy_and_unused, what="a busy kernel with an unused GPU in the report", timeout=30)
        assert latest_report(service)["gpu_unused"]["gpu_memory_bytes"] >= 18 * GIB
    finally:
        server.request(f"api/kernels/{kernel_id}/interrupt", "POST")
        client.get_shell_msg(timeout=30)  # the interrupted cell's reply


def stays_unknown(server: MeterServer, kernel_id: str, reason: str, windows: int = 3) -> None:
    """Every reading over ``windows`` windows of the server's own time says unknown, for ``reason``."""
    start = datetime.fromisoformat(server.usage()["sampled_at"])

    def long_enough() -> bool:
        document = server.usage()
        (kernel,) = [k for k in document["kernels"] if k["id"] == kernel_id]
        assert kernel["gpu_unused"]["seconds"] is None, kernel
        assert reason in kernel["gpu_unused"]["reason"]
        assert document["gpu_unused"]["seconds"] is None
        return (datetime.fromisoformat(document["sampled_at"]) - start).total_seconds() >= windows * WINDOW

    wait_until(long_enough, what=f"{windows} windows without data", timeout=30)


def mig_a100() -> FakeDevice:
    device = FakeDevice.a100(0)
    device.mig_mode = 1
    device.migs = {0: FakeMig(3, "Simulated NVIDIA A100 MIG 2g.20gb", "MIG-5e1f0000-0000-4000-8000-000000000003",
                              20 * GIB)}  # fmt: skip
    return device


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("old driver", "570.86.15"),  # its samples carry host pids: the kernel would look unused
        ("mig", "MIG"),
        ("nvml error", "NVML failed"),
    ],
)
def test_windows_without_data_never_count(server: MeterServer, case: str, reason: str) -> None:
    kernel_id, pid = start_kernel(server, f"{case}.ipynb")
    write(server, processes=[FakeProcess(0, pid, GIB)])
    wait_until(lambda: unused_at_least(server, kernel_id, WINDOW), what="a first unused window", timeout=30)
    if case == "old driver":
        write(server, driver="565.57.01", processes=[FakeProcess(0, pid, GIB)],
              utilization=[FakeUtilization(0, pid, 90)], host_pid_offset=1_000_000)  # fmt: skip
    elif case == "mig":
        write(server, devices=[mig_a100()], processes=[FakeProcess(0, pid, GIB, mig=0)])
    else:
        write(server, processes=[FakeProcess(0, pid, GIB)], errors={"nvmlDeviceGetProcessUtilization": 999})

    def unknown() -> bool:  # the kernel's windows and the server's need not end at the same time
        document = server.usage()
        (kernel,) = [k for k in document["kernels"] if k["id"] == kernel_id]
        return kernel["gpu_unused"]["seconds"] is None and document["gpu_unused"]["seconds"] is None

    wait_until(unknown, what="an unknown window", timeout=30)
    stays_unknown(server, kernel_id, reason)
    (kernel,) = [k for k in server.usage()["kernels"] if k["id"] == kernel_id]
    assert kernel["gpu_memory_bytes"] == GIB  # the memory figures still stand
    write(server, processes=[FakeProcess(0, pid, GIB)])
    wait_until(lambda: unused_at_least(server, kernel_id, WINDOW), what="counted again", timeout=30)


@pytest.mark.parametrize("interval", [-1, 9])
def test_an_interval_the_driver_buffer_cannot_cover_is_refused(interval: float) -> None:
    with pytest.raises(TraitError, match="about 10 s"):
        FracnbMeter(gpu_unused_interval=interval)
