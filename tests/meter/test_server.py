"""The usage endpoint of a real jupyter server with real kernels; GPUs from the fake NVML."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from jupyter_server.base.handlers import APIHandler

from fracnb_meter.contract import NO_GPU_REASON
from fracnb_meter.server import FracnbMeter, reading_interval
from fracnb_meter.testing.fakenvml import FakeDevice, FakeMig, FakeProcess, FakeState, read_state
from fracnb_meter.testing.server import MeterServer, StateFile, start_server
from fracnb_testbed.procs import wait_until
from tests.meter.meter_helpers import GIB, Kernel, evaluate, wait_for_execution_state


@pytest.fixture
def child_of_analysis(kernels: dict[str, Kernel]) -> Iterator[int]:
    """A child process started by the analysis kernel (like a data loader)."""
    client = kernels["analysis.ipynb"].client
    setup = "import subprocess, sys\nchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])"
    pid = int(evaluate(client, "child.pid", setup))
    yield pid
    evaluate(client, "child.wait()", "child.kill()")


def by_path(document: dict) -> dict[str, dict]:
    return {kernel["path"]: kernel for kernel in document["kernels"]}


def test_every_meter_endpoint_refuses_unauthenticated_requests(meter_server: MeterServer) -> None:
    app = FracnbMeter()
    app.initialize_handlers()
    assert app.handlers  # the extension has endpoints to protect
    checked = 0
    for pattern, handler in app.handlers:
        path = re.sub(r"\(\?P<\w+>[^)]*\)", "0" * 32, pattern.lstrip("/"))
        for method in ("GET", "POST", "PUT", "DELETE"):
            if getattr(handler, method.lower()) is getattr(APIHandler, method.lower()):
                continue  # a verb the endpoint does not have
            body = {} if method in ("POST", "PUT") else None
            for token in (None, "not-the-token"):
                status, answer = meter_server.request(path, method, body, token=token)
                assert status == 403, (method, path, status)
                assert "gpus" not in str(answer)
            status, _answer = meter_server.request(path, method, body)
            assert status != 403, (method, path)
            if method == "GET":
                assert status == 200, path
            checked += 1
    assert checked >= 8


def test_per_kernel_memory_counts_kernel_and_descendants(
    meter_server: MeterServer, kernels: dict[str, Kernel], child_of_analysis: int
) -> None:
    analysis, train = kernels["analysis.ipynb"], kernels["train.ipynb"]
    foreign_pid = os.getpid()  # a process outside the server: another tenant
    processes = [
        FakeProcess(0, analysis.pid, 1 * GIB),
        FakeProcess(0, child_of_analysis, 2 * GIB),
        FakeProcess(0, train.pid, GIB // 2),
        FakeProcess(0, meter_server.process.pid, GIB // 4),
        FakeProcess(0, foreign_pid, 4 * GIB),
    ]
    meter_server.state.write(FakeState(devices=[FakeDevice.a100(0)], processes=processes))

    document = meter_server.usage()

    assert document["available"] is True
    assert document["simulated"] is True
    assert document["per_process_memory"] is True
    listed = by_path(document)
    assert listed["analysis.ipynb"]["gpu_memory_bytes"] == 3 * GIB
    assert listed["analysis.ipynb"]["id"] == analysis.id
    assert listed["analysis.ipynb"]["pid"] == analysis.pid
    assert listed["analysis.ipynb"]["session_name"] == "analysis.ipynb"
    assert listed["train.ipynb"]["gpu_memory_bytes"] == GIB // 2
    assert document["server"]["gpu_memory_bytes"] == 3 * GIB + GIB // 2 + GIB // 4
    assert document["other_tenants"]["gpu_memory_bytes"] == 4 * GIB
    assert document["gpus"][0]["memory_used_bytes"] == 7 * GIB + GIB // 4 + GIB // 2
    assert str(foreign_pid) not in json.dumps(document)
    assert document["budget"] == {
        "fraction": 0.25,
        "memory_bytes": 20 * GIB,
        "isolation": "none",
        "backend": "time-slicing",
        "profile": "quarter",
        "profile_display_name": "Quarter of an A100",
        "soft_cap_bytes": 19 * GIB,
        "error": None,
    }
    assert datetime.fromisoformat(document["sampled_at"]).tzinfo is not None


def test_kernel_without_gpu_processes_uses_zero(meter_server: MeterServer, kernels: dict[str, Kernel]) -> None:
    train = kernels["train.ipynb"]
    state = FakeState(devices=[FakeDevice.a100(0)], processes=[FakeProcess(0, train.pid, GIB)])
    meter_server.state.write(state)
    listed = by_path(meter_server.usage())
    assert listed["analysis.ipynb"]["gpu_memory_bytes"] == 0
    assert listed["train.ipynb"]["gpu_memory_bytes"] == GIB


@pytest.mark.parametrize("memory", [None, GIB], ids=["not-available", "host-numbers"])
def test_old_driver_in_a_container_reports_no_per_kernel_numbers(
    meter_server: MeterServer, kernels: dict[str, Kernel], memory: int | None
) -> None:
    train = kernels["train.ipynb"]
    state = FakeState(
        driver_version="550.54.15",
        devices=[FakeDevice.a100(0)],
        processes=[FakeProcess(0, train.pid, memory)],
    )
    meter_server.state.write(state)
    document = meter_server.usage()
    assert document["available"] is True
    assert document["per_process_memory"] is False
    assert "550.54.15" in document["reason"]
    assert "565" in document["reason"]
    assert all(kernel["gpu_memory_bytes"] is None for kernel in document["kernels"])
    # Time-slicing shares the device, so its usage is not this server's: no figure at all.
    assert document["server"]["gpu_memory_bytes"] is None
    assert document["other_tenants"]["gpu_memory_bytes"] is None


def test_mig_instances_are_the_devices(meter_server: MeterServer, kernels: dict[str, Kernel]) -> None:
    analysis = kernels["analysis.ipynb"]
    device = FakeDevice.a100(0)
    device.mig_mode = 1
    device.migs = {
        0: FakeMig(3, "NVIDIA A100 MIG 1g.10gb", "MIG-aaaa", 10 * GIB),
        2: FakeMig(5, "NVIDIA A100 MIG 2g.20gb", "MIG-bbbb", 20 * GIB),
    }
    processes = [FakeProcess(0, analysis.pid, 3 * GIB, mig=2)]
    meter_server.state.write(FakeState(devices=[device], processes=processes))

    document = meter_server.usage()

    assert [gpu["uuid"] for gpu in document["gpus"]] == ["MIG-aaaa", "MIG-bbbb"]
    assert document["gpus"][1]["mig"] == {"gpu_instance_id": 5, "parent_uuid": device.uuid}
    assert document["gpus"][1]["memory_total_bytes"] == 20 * GIB
    assert document["gpus"][1]["memory_used_bytes"] == 3 * GIB
    assert document["gpus"][0]["utilization_percent"] is None
    assert by_path(document)["analysis.ipynb"]["gpu_memory_bytes"] == 3 * GIB


@pytest.mark.parametrize(
    "errors",
    [
        {"nvmlDeviceGetCount_v2": 999},
        {"nvmlDeviceGetMemoryInfo_v2": 999},
        {"nvmlDeviceGetComputeRunningProcesses_v3": 999},
        {"nvmlSystemGetDriverVersion": 999},
        # a failure, then a driver that cannot be initialised again
        {"nvmlDeviceGetCount_v2": 999, "nvmlInitWithFlags": 9},
    ],
    ids=["count", "memory", "processes", "driver-version", "init"],
)
def test_nvml_errors_mean_no_gpu_not_a_server_error(
    meter_server: MeterServer, kernels: dict[str, Kernel], errors: dict[str, int]
) -> None:
    meter_server.state.write(FakeState(devices=[FakeDevice.a100(0)], errors=errors))
    for _ in range(2):  # the second reading starts again from nvmlInit
        document = meter_server.usage()
        assert document["available"] is False
        assert "NVML failed" in document["reason"] or "not loaded" in document["reason"]
        assert document["gpus"] == []
        assert {k["path"] for k in document["kernels"]} >= {"analysis.ipynb", "train.ipynb"}
        assert all(kernel["gpu_memory_bytes"] is None for kernel in document["kernels"])
    # The next reading recovers once the driver answers again.
    meter_server.state.write(FakeState(devices=[FakeDevice.a100(0)]))
    assert meter_server.usage()["available"] is True


def test_no_gpu_and_no_driver(meter_server: MeterServer, kernels: dict[str, Kernel]) -> None:
    meter_server.state.write(FakeState(devices=[]))
    assert meter_server.usage()["reason"] == "No GPU is visible to this server."
    meter_server.state.path.unlink()
    try:
        document = meter_server.usage()
        assert document["available"] is False
        assert "driver is not loaded" in document["reason"]
    finally:
        meter_server.state.write(FakeState(devices=[FakeDevice.a100(0)]))
    assert meter_server.usage()["available"] is True


def test_busy_silent_kernel_counts_as_activity(meter_server: MeterServer, kernels: dict[str, Kernel]) -> None:
    kernel = kernels["train.ipynb"]
    msg_id = kernel.client.execute("import time; time.sleep(4)")
    wait_for_execution_state(meter_server, kernel.id, "busy")
    first = last_activity(meter_server)
    # No message leaves the silent cell, yet the server's last activity keeps moving.
    wait_until(
        lambda: (last_activity(meter_server) - first).total_seconds() > 0.5,
        what="last_activity to advance while the cell runs silently",
        timeout=3,
    )
    reply = kernel.client.get_shell_msg(timeout=30)
    assert (reply["parent_header"]["msg_id"], reply["content"]["status"]) == (msg_id, "ok"), "the cell ran to its end"
    wait_for_execution_state(meter_server, kernel.id, "idle")
    idle = last_activity(meter_server)
    for _ in range(3):
        meter_server.usage()  # polling the meter is not activity either
    assert last_activity(meter_server) == idle


def test_one_timer_reads_for_the_charts_and_the_sessions_statistics() -> None:
    """A reading serves both, so the timer runs at the shorter interval asked for; 0 where none is."""
    assert reading_interval(10.0, 5.0, record_sessions=True) == 5.0
    assert reading_interval(2.0, 5.0, record_sessions=True) == 2.0
    assert reading_interval(10.0, 5.0, record_sessions=False) == 10.0
    assert reading_interval(0.0, 5.0, record_sessions=True) == 5.0
    assert reading_interval(10.0, 0.0, record_sessions=True) == 10.0
    assert reading_interval(0.0, 5.0, record_sessions=False) == 0.0


def last_activity(server: MeterServer) -> datetime:
    return datetime.fromisoformat(server.request("api/status")[1]["last_activity"])


def test_simulated_allocation_from_a_kernel(meter_server: MeterServer, kernels: dict[str, Kernel]) -> None:
    meter_server.state.write(FakeState(devices=[FakeDevice.a100(0)]))
    client = kernels["analysis.ipynb"].client
    shown = evaluate(client, "sim.allocate('2GiB')", "import fracnb_meter.simulate as sim")
    # What a notebook shows under the cell: a sentence, not a raw count of bytes.
    assert shown == "this kernel now uses 2 GiB of simulated GPU memory on GPU 0"
    assert by_path(meter_server.usage())["analysis.ipynb"]["gpu_memory_bytes"] == 2 * GIB
    assert evaluate(client, "int(sim.allocate(512 << 20))") == str(2 * GIB + (512 << 20))
    evaluate(client, "sim.release()")
    assert by_path(meter_server.usage())["analysis.ipynb"]["gpu_memory_bytes"] == 0


def test_without_nvml_library_the_gpu_is_unavailable(tmp_path: Path, fake_nvml_library: Path) -> None:
    server = start_server(tmp_path, library=None, state=None, meter_config={})
    try:
        kernel_id = server.start_session("plain.ipynb")
        document = server.usage()
    finally:
        server.stop()
    assert document["available"] is False
    assert "libnvidia-ml.so.1" in document["reason"]
    assert [k["id"] for k in document["kernels"]] == [kernel_id]
    assert document["kernels"][0]["gpu_memory_bytes"] is None
    assert document["budget"]["memory_bytes"] is None  # no contract: plain JupyterLab


def test_a_cpu_only_server_never_reads_a_gpu(tmp_path: Path, fake_nvml_library: Path) -> None:
    """The contract says no GPU: the meter says so, never opens NVML, and the simulator refuses."""
    state = StateFile(tmp_path / "nvml-state")
    state.write(FakeState(devices=[FakeDevice.a100(0)]))
    cpu_only = {
        "FRACNB_PROFILE": "cpu",
        "FRACNB_CHOICE": "",
        "FRACNB_GPU_FRACTION": "0",
        "FRACNB_GPU_MEMORY_LIMIT": "0",
        "FRACNB_GPU_BACKEND": "none",
        "FRACNB_ISOLATION": "none",
        "NVIDIA_VISIBLE_DEVICES": "void",
    }
    server = start_server(tmp_path, fake_nvml_library, state, meter_config={}, extra_env=cpu_only)
    try:
        kernel_id = server.start_session("cpu.ipynb")
        document = server.usage()
        client = server.client(kernel_id)
        refused = evaluate(
            client,
            "refusal",
            "import fracnb_meter.simulate as sim\n"
            "try:\n    sim.allocate('1GiB')\n    refusal = None\n"
            "except sim.SimulationError as error:\n    refusal = str(error)",
        )
        maps = Path(f"/proc/{server.process.pid}/maps").read_text()
    finally:
        server.stop()
    assert document["available"] is False
    assert document["gpus"] == []
    assert document["reason"] == NO_GPU_REASON
    assert document["budget"]["backend"] == "none"
    assert "libnvidia-ml" not in maps  # NVML was never loaded, so nothing of the node's GPU was read
    assert "No GPU for this server" in refused
    assert read_state(state.path).processes == []  # nobody else's "in use by all processes" grew
