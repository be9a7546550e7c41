"""Two things the hub's idle culling needs from a real jupyter_server with the meter:

- **Use, not polling.** The server's last use (a cell run, typing, a save, a kernel computing) is
  posted to the fracnb service (``api/activity``); a page polling the server (GET requests, the
  meter's usage document) moves the hub's activity but not the use.
- **The stopped notice.** After a hibernation, the usage document carries the report, and the
  answer waits until a page that polls the usage document has read it, so the page can say what
  was saved once the server is gone.

The service here is the stand-in of tests/service_reports.py (which checks every document against
its schema); the real service takes the same reports in tests/service.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from jupyter_client.blocking import BlockingKernelClient

from fracnb_meter.hibernation.notice import KEPT_S, LastHibernation
from fracnb_meter.testing.fakenvml import FakeDevice, FakeState
from fracnb_meter.testing.server import MeterServer, StateFile, start_server
from fracnb_schemas import HIBERNATION_REPORT, check
from fracnb_testbed.procs import wait_until
from tests.meter.meter_helpers import QUARTER_CONTRACT, wait_for_execution_state
from tests.service_reports import ReportServer

INTERVAL = 0.5  # the meter's activity_interval here (30 s by default)


@pytest.fixture(scope="module")
def server(fake_nvml_library: Path, tmp_path_factory: pytest.TempPathFactory, service: ReportServer
           ) -> Iterator[MeterServer]:  # fmt: skip
    tmp = tmp_path_factory.mktemp("use")
    home = tmp / "home"
    home.mkdir(mode=0o700)
    state = StateFile(tmp / "nvml-state")
    state.write(FakeState(devices=[FakeDevice.a100(0)]))
    server = start_server(
        tmp,
        fake_nvml_library,
        state,
        meter_config={"sample_interval_floor": 0.0, "activity_interval": INTERVAL, "record_sessions": False},
        extra_env={**QUARTER_CONTRACT, **service.hub_environment(), "HOME": str(home)},
    )
    yield server
    server.stop()


def parsed(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def now() -> datetime:
    return datetime.now(timezone.utc)


def last_use(service: ReportServer) -> datetime | None:
    return parsed(service.uses[-1]["last_use"]) if service.uses else None


def hub_heard_since(service: ReportServer, moment: datetime) -> bool:
    return any(parsed(post["last_activity"]) >= moment for post in list(service.hub_activity))


def poll_until_the_meter_has_reported_twice(server: MeterServer, service: ReportServer) -> None:
    """Poll as a page does, and wait until the hub heard of it twice: the meter's reports of those two
    ticks (the hub's activity, then the service's use) are in."""
    for _ in range(2):
        polled = now()
        assert server.request("api/contents")[0] == 200
        assert server.request("fracnb/api/usage")[0] == 200
        assert server.request("api/kernels")[0] == 200
        wait_until(lambda moment=polled: hub_heard_since(service, moment), what="the hub to hear of the polls",
                   timeout=30, interval=0.1)  # fmt: skip


def test_polling_is_not_use_but_a_save_typing_and_a_cell_are(server: MeterServer, service: ReportServer) -> None:
    wait_until(lambda: service.uses, what="the first use report", timeout=30, interval=0.1)
    started = last_use(service)
    assert service.uses[-1]["server_name"] == ""
    poll_until_the_meter_has_reported_twice(server, service)
    assert last_use(service) == started, "a page polling the server counted as use"

    saved = now()
    status, _ = server.request("api/contents/notes.txt", "PUT", {"type": "file", "format": "text", "content": "x"})
    assert status in (200, 201)
    wait_until(lambda: last_use(service) >= saved, what="the save to count as use", timeout=30, interval=0.1)

    typed = now()
    assert server.request("fracnb/api/use", "POST")[0] == 204
    wait_until(lambda: last_use(service) >= typed, what="typing to count as use", timeout=30, interval=0.1)
    assert server.request("fracnb/api/use", "POST", token=None)[0] == 403  # authenticated like the rest

    kernel_id = server.start_session("cells.ipynb")
    client: BlockingKernelClient = server.client(kernel_id)
    poll_until_the_meter_has_reported_twice(server, service)
    ran = now()
    client.execute_interactive("1 + 1", timeout=60, output_hook=lambda _msg: None)
    wait_until(lambda: last_use(service) >= ran, what="a cell run to count as use", timeout=30, interval=0.1)
    assert last_use(service) <= now()


def test_a_kernel_in_a_long_cell_stays_busy_while_pages_poll_its_usage(
    server: MeterServer, service: ReportServer
) -> None:
    kernel_id = server.start_session("long.ipynb")
    client = server.client(kernel_id)
    client.execute("import time\ntime.sleep(600)")
    state = lambda: server.request(f"api/kernels/{kernel_id}")[1]["execution_state"]  # noqa: E731
    wait_until(lambda: state() == "busy", what="the cell to run", timeout=30, interval=0.05)
    # JupyterLab's kernel usage panel (jupyter-resource-usage) asks on the control channel; the kernel
    # answers at once, with a "busy" and an "idle" status of its own.
    status, answer = server.request(f"api/metrics/v1/kernel_usage/get_usage/{kernel_id}")
    assert status == 200, answer
    assert answer["kernel_id"] == kernel_id  # answered by the kernel while its cell runs
    started = len(service.uses)
    wait_until(lambda: len(service.uses) >= started + 2, what="two more use reports", timeout=30, interval=0.1)
    assert state() == "busy"
    assert parsed(service.uses[-1]["last_use"]) > parsed(service.uses[started - 1]["last_use"])  # computing is use
    server.request(f"api/kernels/{kernel_id}/interrupt", "POST")


def test_the_usage_document_keeps_the_hibernation_for_the_page_that_polls_it(server: MeterServer) -> None:
    kernel_id = server.start_session("train.ipynb")
    client = server.client(kernel_id)
    client.execute_interactive("weights = list(range(1000))", timeout=60, output_hook=lambda _msg: None)
    wait_for_execution_state(server, kernel_id, "idle")
    assert server.usage()["hibernation"] is None
    seen: list[tuple[float, bool]] = []
    polling = threading.Event()

    def page() -> None:  # a JupyterLab page polling the usage document, as the meter's front end does
        while not polling.is_set():
            asked = time.monotonic()  # when the GET left: the server answers the POST after serving it
            document = server.usage()
            seen.append((asked, document["hibernation"] is not None))
            time.sleep(0.3)

    poller = threading.Thread(target=page, daemon=True)
    poller.start()
    try:
        wait_until(lambda: len(seen) >= 2, what="the page to poll", timeout=30, interval=0.05)
        status, report = server.request("fracnb/api/hibernate", "POST", {"timeout_seconds": 30})
        answered = time.monotonic()
    finally:
        polling.set()
        poller.join(10)
    assert status == 200, report
    check(HIBERNATION_REPORT, report, check_formats=True)
    [saved] = [k for k in report["kernels"] if k["path"] == "train.ipynb"]
    assert saved["status"] == "saved"
    read = [moment for moment, carries in seen if carries]
    assert read, "the polling page never read the outcome"
    assert read[0] <= answered, "the answer came before the polling page had asked for the outcome"
    kept = server.usage()["hibernation"]
    assert [k["status"] for k in kept["kernels"]] == [k["status"] for k in report["kernels"]]


def test_without_a_polling_page_the_answer_does_not_wait_and_the_report_expires() -> None:
    clock = [100.0]
    last = LastHibernation(clock=lambda: clock[0])

    async def scenario() -> tuple[bool, float]:
        last.keep({"kernels": []})
        started = time.monotonic()
        read = await last.wait_for_page(3.0)
        return read, time.monotonic() - started

    read, waited = asyncio.run(scenario())
    assert (read, last.report) == (False, {"kernels": []})
    assert waited < 0.5
    clock[0] += KEPT_S + 1
    assert last.report is None
