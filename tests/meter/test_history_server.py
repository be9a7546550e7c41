"""The memory history in the usage document of a real server: it follows the fake NVML's
memory as it rises and falls, keeps a kernel's series across its restart, and reads on its
own between polls."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fracnb_meter.testing.fakenvml import FakeDevice, FakeProcess, FakeState
from fracnb_meter.testing.server import MeterServer, StateFile, start_server
from fracnb_testbed.procs import wait_until
from tests.meter.meter_helpers import GIB, evaluate

BUDGET = {
    "FRACNB_GPU_FRACTION": "0.25",
    "FRACNB_GPU_MEMORY_LIMIT": str(20 * GIB),
    "FRACNB_ISOLATION": "none",
    "FRACNB_GPU_BACKEND": "time-slicing",
}


@pytest.fixture(scope="module")
def server(fake_nvml_library: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeterServer]:
    tmp_path = tmp_path_factory.mktemp("history")
    state = StateFile(tmp_path / "nvml-state")
    state.write(FakeState(devices=[FakeDevice.a100(0)]))
    server = start_server(
        tmp_path,
        fake_nvml_library,
        state,
        meter_config={"sample_interval_floor": 0.0, "history_interval": 0.1, "activity_interval": 0},
        extra_env=BUDGET,
    )
    yield server
    server.stop()


def kernel_pid(server: MeterServer, kernel_id: str) -> int:
    return int(evaluate(server.client(kernel_id), "os.getpid()", "import os"))


def use(server: MeterServer, pid: int, gib: float) -> None:
    assert server.state is not None
    server.state.write(FakeState(devices=[FakeDevice.a100(0)], processes=[FakeProcess(0, pid, int(gib * GIB))]))


def kernel_series(document: dict[str, Any], kernel_id: str) -> dict[str, Any]:
    return next(k for k in document["history"]["kernels"] if k["id"] == kernel_id)


def wait_for_latest(server: MeterServer, kernel_id: str, gib: float) -> dict[str, Any]:
    """The first usage document whose kernel series ends at ``gib``."""
    found: dict[str, Any] = {}

    def reached() -> bool:
        found.update(server.usage())
        latest = kernel_series(found, kernel_id)["series"]["latest"]
        return latest is not None and latest["bytes"] == int(gib * GIB)

    wait_until(reached, what=f"the kernel's history to reach {gib} GiB", timeout=30, interval=0.05)
    return found


def test_the_history_follows_memory_up_and_down_and_survives_a_restart(server: MeterServer) -> None:
    kernel_id = server.start_session("train.ipynb")
    pid = kernel_pid(server, kernel_id)
    for gib in (2, 6, 1):
        use(server, pid, gib)
        document = wait_for_latest(server, kernel_id, gib)
    history = document["history"]
    train = kernel_series(document, kernel_id)
    assert train["path"] == "train.ipynb"
    values = [p["bytes"] / GIB for p in train["series"]["points"]]
    assert max(values) == 6  # points keep each bucket's highest reading
    assert train["series"]["latest"]["bytes"] == GIB  # and the line ends at the latest
    assert train["series"]["peak"]["bytes"] == 6 * GIB
    assert history["server"]["peak"]["bytes"] == 6 * GIB
    assert 0 < train["series"]["peak"]["at_s"] <= history["now_s"]
    assert document["budget"]["memory_bytes"] == 20 * GIB

    status, _ = server.request(f"api/kernels/{kernel_id}/restart", "POST")
    assert status == 200
    new_pid = kernel_pid(server, kernel_id)
    assert new_pid != pid
    use(server, new_pid, 3)
    after = kernel_series(wait_for_latest(server, kernel_id, 3), kernel_id)
    assert after["series"]["peak"]["bytes"] == 6 * GIB  # the peak from before the restart
    assert after["carried_from"] is None  # the same kernel id: the same series


def test_a_new_kernel_for_the_same_notebook_continues_the_chart(server: MeterServer) -> None:
    first = server.start_session("carry.ipynb")
    use(server, kernel_pid(server, first), 5)
    wait_for_latest(server, first, 5)
    status, sessions = server.request("api/sessions")
    assert status == 200
    session_id = next(s["id"] for s in sessions if s["path"] == "carry.ipynb")
    assert server.request(f"api/sessions/{session_id}", "DELETE")[0] == 204
    second = server.start_session("carry.ipynb")
    assert second != first
    use(server, kernel_pid(server, second), 1)
    carried = kernel_series(wait_for_latest(server, second, 1), second)
    assert carried["carried_from"] == first
    assert carried["series"]["peak"]["bytes"] == 5 * GIB


def test_the_meter_reads_between_polls(server: MeterServer) -> None:
    """history_interval: points at times no poll read, so the chart covers time nobody watched."""
    since = server.usage()["history"]["now_s"]
    polled = {since}

    def a_reading_no_poll_made() -> bool:
        history = server.usage()["history"]
        polled.add(history["now_s"])
        return any(p["at_s"] > since and p["at_s"] not in polled for p in history["server"]["points"])

    wait_until(a_reading_no_poll_made, what="a reading between polls", timeout=30, interval=0.3)
