"""The meter keeps this session's statistics from the fake NVML and posts them to the fracnb service.

A real jupyter server with a real kernel reads simulated GPU memory that rises, falls, survives a
kernel restart and reaches the budget; the service is the report stand-in of tests/service_reports.py,
which checks every post against session-report.schema.json (the real service's handling of the
same reports, against a real hub and databases, is tested in tests/service and tests/history).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from meter_helpers import GIB, evaluate

from fracnb_meter.schema import SESSION_STATS, check
from fracnb_meter.testing.fakenvml import FakeDevice, FakeProcess, FakeState, FakeUtilization
from fracnb_meter.testing.server import MeterServer, StateFile, start_server
from fracnb_testbed.procs import wait_until
from tests.service_reports import ReportServer

BUDGET = 20 * GIB


@pytest.fixture
def service() -> Iterator[ReportServer]:
    service = ReportServer.start()
    yield service
    service.stop()


@pytest.fixture
def server(fake_nvml_library: Path, tmp_path: Path, service: ReportServer) -> Iterator[MeterServer]:
    state = StateFile(tmp_path / "nvml-state")
    state.write(FakeState(devices=[FakeDevice.a100(0)]))
    contract = {
        "FRACNB_GPU_FRACTION": "0.25",
        "FRACNB_GPU_MEMORY_LIMIT": str(BUDGET),
        "FRACNB_ISOLATION": "none",
        "FRACNB_GPU_BACKEND": "time-slicing",
        "FRACNB_PROFILE": "a100",
        "FRACNB_CHOICE": "size=quarter",
    }
    config = {
        "sample_interval_floor": 0.0,
        "activity_interval": 0,
        "in_container": True,
        "session_sample_interval": 0.1,
        "session_report_interval": 0.3,
    }
    server = start_server(
        tmp_path, fake_nvml_library, state, meter_config=config, extra_env={**contract, **service.environment()}
    )
    yield server
    server.stop()


def session(server: MeterServer) -> dict:
    status, document = server.request("fracnb/api/session")
    assert status == 200, document
    check(SESSION_STATS, document, check_formats=True)
    return document


def hold(server: MeterServer, pid: int, memory: int, sm_percent: int = 0) -> None:
    """The kernel's process holds ``memory`` on the GPU (and computes); returns once the meter has read it."""
    assert server.state is not None
    utilization = [FakeUtilization(0, pid, sm_percent)] if sm_percent else []
    processes = [FakeProcess(0, pid, memory)]
    server.state.write(FakeState(devices=[FakeDevice.a100(0)], processes=processes, utilization=utilization))
    wait_until(lambda: server.usage()["server"]["gpu_memory_bytes"] == memory, what=f"{memory} bytes read", timeout=30)


def kernel_pid(server: MeterServer, kernel_id: str) -> int:
    return int(evaluate(server.client(kernel_id), "os.getpid()", "import os"))


def test_peaks_rise_and_fall_survive_a_restart_and_reach_the_service(
    server: MeterServer, service: ReportServer
) -> None:
    kernel_id = server.start_session("train.ipynb")
    pid = kernel_pid(server, kernel_id)
    for memory in (5 * GIB, 12 * GIB, 2 * GIB):
        hold(server, pid, memory)
    assert session(server)["report"]["peak_bytes"] == 12 * GIB
    assert session(server)["kernels"] == [{"id": kernel_id, "name": "python3", "peak_bytes": 12 * GIB, "oom_errors": 0}]

    status, _ = server.request(f"api/kernels/{kernel_id}/restart", "POST", {})
    assert status == 200
    new_pid = kernel_pid(server, kernel_id)
    assert new_pid != pid
    hold(server, new_pid, 3 * GIB)
    assert session(server)["kernels"] == [{"id": kernel_id, "name": "python3", "peak_bytes": 12 * GIB, "oom_errors": 0}]

    wait_until(
        lambda: any(r["peak_bytes"] == 12 * GIB for r in service.sessions), what="a report of the peak", timeout=30
    )
    report = service.sessions[-1]
    assert (report["profile"], report["choice"], report["fraction"], report["budget_bytes"]) == (
        "a100", "size=quarter", 0.25, BUDGET
    )  # fmt: skip
    assert report["ended_at"] is None
    assert len({r["session_id"] for r in service.sessions}) == 1


def test_memory_at_the_budget_counts_as_an_oom_event_and_time_above_95(server: MeterServer) -> None:
    kernel_id = server.start_session("big.ipynb")
    pid = kernel_pid(server, kernel_id)
    hold(server, pid, BUDGET)
    wait_until(lambda: session(server)["report"]["seconds_above_95"] > 0.2, what="time at the budget", timeout=30)
    hold(server, pid, GIB)
    report = session(server)["report"]
    assert report["oom_events"] == 1
    assert report["seconds_above_80"] >= report["seconds_above_95"] > 0.2


def test_a_failing_service_changes_nothing_for_the_meter_and_is_retried(
    server: MeterServer, service: ReportServer
) -> None:
    wait_until(lambda: len(service.sessions) >= 1, what="a first report", timeout=30)
    service.accept_sessions = False
    wait_until(lambda: service.refused_sessions >= 2, what="reports refused", timeout=30)
    assert server.usage()["available"]  # the meter answers as before
    assert session(server)["report"]["ended_at"] is None
    received = len(service.sessions)
    service.accept_sessions = True
    wait_until(lambda: len(service.sessions) > received, what="reports again", timeout=30)


def test_the_last_report_is_sent_when_the_server_stops(server: MeterServer, service: ReportServer) -> None:
    kernel_id = server.start_session("short.ipynb")
    hold(server, kernel_pid(server, kernel_id), 7 * GIB)
    server.stop()
    final = service.sessions[-1]
    assert final["ended_at"] is not None
    assert final["peak_bytes"] == 7 * GIB


def test_busy_share_follows_per_process_utilisation(server: MeterServer) -> None:
    kernel_id = server.start_session("busy.ipynb")
    pid = kernel_pid(server, kernel_id)
    hold(server, pid, GIB)
    wait_until(lambda: session(server)["report"]["busy_share"] == 0.0, what="an idle GPU", timeout=30)
    hold(server, pid, 2 * GIB, sm_percent=60)
    wait_until(lambda: session(server)["report"]["busy_share"] > 0.3, what="a busy GPU", timeout=30)
    hold(server, pid, 3 * GIB)
    busy = session(server)["report"]["busy_share"]
    wait_until(lambda: session(server)["report"]["busy_share"] < busy, what="idle again", timeout=30)
