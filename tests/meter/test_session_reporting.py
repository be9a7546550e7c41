"""The meter keeps this session's statistics from the fake NVML and posts them to the fracnb service.

A real jupyter server with a real kernel reads simulated GPU memory that rises, falls, survives a
kernel restart and reaches the budget, and reads the kernels' output for GPU out-of-memory errors
(cells raise exceptions with the libraries' own names and messages; no GPU library is needed); the
service is the report stand-in of tests/service_reports.py, which checks every post against
session-report.schema.json (the real service's handling of the same reports, against a real hub and
databases, is tested in tests/service and tests/history).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from fracnb_meter.testing.fakenvml import FakeDevice, FakeProcess, FakeState, FakeUtilization
from fracnb_meter.testing.server import MeterServer, StateFile, start_server
from fracnb_schemas import SESSION_STATS, check
from fracnb_testbed.procs import wait_until
from tests.meter.meter_helpers import GIB, evaluate
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
    # Warnings stay quiet in the server's log, except unclosed resources (the OOM tests read the log).
    extra_env = {**contract, **service.environment(), "PYTHONWARNINGS": "ignore,always::ResourceWarning"}
    server = start_server(tmp_path, fake_nvml_library, state, meter_config=config, extra_env=extra_env)
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
    # 570.86.15: the first driver whose utilisation samples name a container's own pids.
    server.state.write(FakeState(driver_version="570.86.15", devices=[FakeDevice.a100(0)], processes=processes,
                                 utilization=utilization))  # fmt: skip
    wait_until(lambda: server.usage()["server"]["gpu_memory_bytes"] == memory, what=f"{memory} bytes read", timeout=30)


def kernel_pid(server: MeterServer, kernel_id: str) -> int:
    return int(evaluate(server.client(kernel_id), "os.getpid()", "import os"))


TORCH_OOM = """
class OutOfMemoryError(RuntimeError):
    pass
OutOfMemoryError.__module__ = "torch"
raise OutOfMemoryError(
    "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which "
    "3.19 GiB is free. Including non-PyTorch memory, this process has 75.95 GiB memory in use."
)
"""

TF_OOM = """
import sys
print(
    "W tensorflow/core/framework/op_kernel.cc:1828] OP_REQUIRES failed at random_op.cc:74 : RESOURCE_EXHAUSTED: "
    "OOM when allocating tensor with shape[65536,65536] and type float on "
    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
    file=sys.stderr,
)
"""


def run_cell(server: MeterServer, kernel_id: str, code: str) -> str:
    """Execute ``code`` in the kernel as a notebook would; the reply's status ("ok" or "error")."""
    reply = server.client(kernel_id).execute_interactive(code, timeout=60, output_hook=lambda _msg: None)
    return reply["content"]["status"]


def oom_counts(server: MeterServer, kernel_id: str) -> tuple[int, int]:
    """(the session's oom_events, the kernel's oom_errors)."""
    document = session(server)
    kernel = next((k for k in document["kernels"] if k["id"] == kernel_id), {"oom_errors": 0})
    return document["report"]["oom_events"], kernel["oom_errors"]


def watched_session(server: MeterServer, path: str) -> str:
    """A new kernel for ``path``, once the meter reads its output (asking the session endpoint looks for it)."""
    kernel_id = server.start_session(path)
    wait_until(lambda: kernel_id in session(server)["output_watched"], what="the kernel's output watched", timeout=30)
    return kernel_id


def wait_for_oom_counts(server: MeterServer, kernel_id: str, counts: tuple[int, int]) -> None:
    """Wait until the counts reach ``counts``, then check they are exactly that.

    A kernel's output arrives in order, so once the last cell's error is counted, every earlier
    cell's output has been read: a miscount shows as counts past the expected ones.
    """
    wait_until(lambda: oom_counts(server, kernel_id) >= counts, what=f"OOM counts {counts}", timeout=30)
    assert oom_counts(server, kernel_id) == counts


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


def test_a_cuda_out_of_memory_error_in_a_kernel_counts_once_and_reaches_the_service(
    server: MeterServer, service: ReportServer
) -> None:
    kernel_id = watched_session(server, "oom.ipynb")
    # The traceback shows the cell's source, comment included: only the exception's own message counts.
    assert run_cell(server, kernel_id, "# not a CUDA out of memory error\nraise ValueError('bad shape')") == "error"
    assert run_cell(server, kernel_id, "import sys; print('a warning', file=sys.stderr)") == "ok"
    assert run_cell(server, kernel_id, TORCH_OOM) == "error"
    wait_for_oom_counts(server, kernel_id, (1, 1))
    wait_until(
        lambda: service.sessions and service.sessions[-1]["oom_events"] == 1, what="a report with the OOM", timeout=30
    )


def test_a_tensorflow_message_on_stderr_counts_and_with_its_exception_counts_once(server: MeterServer) -> None:
    kernel_id = watched_session(server, "tf.ipynb")
    assert run_cell(server, kernel_id, TF_OOM) == "ok"
    wait_for_oom_counts(server, kernel_id, (1, 1))
    exception = (
        "class ResourceExhaustedError(Exception): pass\n"
        "raise ResourceExhaustedError('OOM when allocating tensor with shape[65536,65536] on GPU:0')"
    )
    raising = TF_OOM + exception
    assert run_cell(server, kernel_id, raising) == "error"  # the log line and the exception of one cell
    assert run_cell(server, kernel_id, "1 + 1") == "ok"
    assert run_cell(server, kernel_id, TORCH_OOM) == "error"
    wait_for_oom_counts(server, kernel_id, (3, 3))


def test_the_watch_survives_a_kernel_restart_and_shutdown_without_errors(server: MeterServer) -> None:
    kernel_id = watched_session(server, "restart.ipynb")
    other_id = watched_session(server, "other.ipynb")
    assert run_cell(server, kernel_id, TORCH_OOM) == "error"
    wait_for_oom_counts(server, kernel_id, (1, 1))

    status, _ = server.request(f"api/kernels/{kernel_id}/restart", "POST", {})
    assert status == 200
    assert run_cell(server, kernel_id, TORCH_OOM) == "error"
    wait_for_oom_counts(server, kernel_id, (2, 2))

    status, _ = server.request(f"api/kernels/{other_id}", "DELETE")
    assert status == 204
    assert run_cell(server, kernel_id, TORCH_OOM) == "error"
    wait_for_oom_counts(server, kernel_id, (3, 3))
    server.stop()
    troubles = [
        line
        for line in server.log.read_text().splitlines()
        if line.startswith(("[W ", "[E ")) or any(word in line for word in ("Traceback", "Warning:", "Uncaught"))
    ]
    assert troubles == []


def test_an_error_after_a_kernel_died_and_came_back_counts(server: MeterServer) -> None:
    """The server's restarter brings a killed kernel back on the same ports: the watch reads it again."""
    kernel_id = watched_session(server, "crash.ipynb")
    pid = kernel_pid(server, kernel_id)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: kernel_pid(server, kernel_id) != pid, what="the kernel back with a new process", timeout=60)
    assert run_cell(server, kernel_id, TORCH_OOM) == "error"
    wait_for_oom_counts(server, kernel_id, (1, 1))
