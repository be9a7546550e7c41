"""A server the hub asked to save at its stop (FRACNB_STOP_HIBERNATION_TIMEOUT, set on pods Kueue manages)
saves its idle kernels' variables when it gets SIGTERM, as a pod Kueue preempts does; a kernel that ran no cell
since the hub's own save before the stop is not written twice. The hub's read of the usage document before a
stop is not a page the save's answer waits for. A real jupyter_server and real kernels."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fracnb_meter.hibernation import layout
from fracnb_meter.hibernation.notice import HIBERNATED_EVENT, NOTICE_WAIT_S, STOPPING_EVENT
from fracnb_meter.testing.server import MeterServer, start_server
from fracnb_spawner.hibernation.userstop import Answer, first_answer
from tests.meter.test_hibernation import hibernate, open_notebook, outcome, run
from tests.service_reports import ReportServer
from tests.websockets import connected

SERVER_NAME = "preempted"


def start(tmp: Path, library: Path, stop_timeout: str | None, service: ReportServer | None = None) -> MeterServer:
    home = tmp / "home"
    home.mkdir(mode=0o700, exist_ok=True)
    env = {"HOME": str(home), "JUPYTERHUB_SERVER_NAME": SERVER_NAME}
    if service is not None:
        env |= {"FRACNB_SERVICE_URL": service.url, "JUPYTERHUB_API_TOKEN": service.token}
    if stop_timeout is not None:
        env["FRACNB_STOP_HIBERNATION_TIMEOUT"] = stop_timeout
    meter = {"sample_interval_floor": 0.0, "activity_interval": 0.0, "record_sessions": False}
    return start_server(tmp, library, None, meter_config=meter, extra_env=env)


def train_notebook(server: MeterServer, cell: str = "epoch = 41") -> None:
    """train.ipynb open in a kernel of ``server``, ``cell`` run in it."""
    _, client = open_notebook(server, "train.ipynb")
    run(client, cell)


def manifests(tmp: Path) -> dict[str, dict]:
    """The saved states on disk, by notebook path."""
    root = tmp / "home" / ".local" / "state" / "fracnb" / "hibernation" / SERVER_NAME
    found = {}
    for manifest in root.glob(f"*/{layout.MANIFEST}"):
        document = json.loads(manifest.read_text())
        found[document["notebook_path"]] = document
    return found


def terminate(server: MeterServer) -> str:
    """SIGTERM, as the kubelet sends a deleted pod; the server's log once it has exited."""
    for client in server.clients:
        client.stop_channels()
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(timeout=60)
    return server.log.read_text()


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def stopped() -> Iterator[list[MeterServer]]:
    """Servers a test started; any still running at its end are stopped."""
    servers: list[MeterServer] = []
    yield servers
    for server in servers:
        if server.process.poll() is None:
            server.stop()


def test_sigterm_saves_the_idle_kernels_variables_where_the_hub_asked_and_tells_the_service(
    fake_nvml_library: Path, tmp: Path, stopped: list[MeterServer], service: ReportServer
) -> None:
    server = start(tmp, fake_nvml_library, "30", service)
    stopped.append(server)
    train_notebook(server, "weights = list(range(1000))\nepoch = 41")

    log = terminate(server)

    saved = manifests(tmp)["train.ipynb"]
    assert {variable["name"] for variable in saved["variables"]} >= {"weights", "epoch"}
    assert "variables saved at the stop" in log
    assert "train.ipynb: saved" in log
    [told] = service.stop_saves  # checked against stop-save.schema.json on receipt
    assert told["server_name"] == SERVER_NAME
    [kernel] = told["hibernation"]["kernels"]
    assert (kernel["path"], kernel["status"], kernel["variables"]) == ("train.ipynb", "saved", 2)


def test_the_services_notice_of_a_kueue_stop_reaches_the_open_pages_on_their_events_socket(
    fake_nvml_library: Path, tmp: Path, stopped: list[MeterServer], service: ReportServer
) -> None:
    """Kueue deleted the pod: its proxy route stays until the hub's poll, so the tab's polls fail with no word
    of why; the socket the tab opened before carries the service's notice, as the hub's pages say it."""
    service.stop_notice = notice = (
        "Your server 'preempted' stopped at 14:00 UTC, preempted by a higher-priority job of team-b; 1 variable "
        "of train.ipynb saved. Files in your home are kept; starting it again waits in Kueue's queue for a GPU."
    )
    server = start(tmp, fake_nvml_library, "30", service)
    stopped.append(server)
    train_notebook(server)

    async def scenario() -> list[dict]:
        url = server.url.replace("http://", "ws://") + "api/events/subscribe"
        told = []
        async with connected(url, server.token) as socket:
            for client in server.clients:
                client.stop_channels()
            server.process.send_signal(signal.SIGTERM)
            while not told or told[-1]["schema_id"] != HIBERNATED_EVENT:
                told.append(json.loads(await asyncio.wait_for(socket.read_message(), timeout=60)))
        return told

    try:
        told = asyncio.run(scenario())
    finally:
        service.stop_notice = None
    server.process.wait(timeout=60)
    # First that it is stopping (its polls fail from SIGTERM on: no restart dialog), then the notice.
    fracnbs = [message for message in told if message["schema_id"] in (STOPPING_EVENT, HIBERNATED_EVENT)]
    assert [message["schema_id"] for message in fracnbs] == [STOPPING_EVENT, HIBERNATED_EVENT]
    assert fracnbs[0]["saving_seconds"] == 30
    event = fracnbs[1]
    assert event["stop"] == "kueue"
    assert event["notice"] == notice
    [kernel] = event["report"]["kernels"]
    assert (kernel["path"], kernel["status"]) == ("train.ipynb", "saved")


def test_a_stop_the_service_has_no_notice_of_tells_the_pages_nothing(
    fake_nvml_library: Path, tmp: Path, stopped: list[MeterServer], service: ReportServer
) -> None:
    service.stop_notice = None  # the service answers {"notice": null}: not a stop Kueue made
    server = start(tmp, fake_nvml_library, "30", service)
    stopped.append(server)
    train_notebook(server)

    log = terminate(server)

    assert service.stop_saves
    assert "the stop's notice for the open pages" not in log


def test_without_the_hubs_request_sigterm_saves_nothing(
    fake_nvml_library: Path, tmp: Path, stopped: list[MeterServer]
) -> None:
    server = start(tmp, fake_nvml_library, None)
    stopped.append(server)
    train_notebook(server)

    log = terminate(server)

    assert manifests(tmp) == {}
    assert "variables saved at the stop" not in log


def test_a_kernel_unchanged_since_the_hubs_save_is_not_saved_again_and_a_changed_one_is(
    fake_nvml_library: Path, tmp: Path, stopped: list[MeterServer]
) -> None:
    server = start(tmp, fake_nvml_library, "30")
    stopped.append(server)
    _, unchanged = open_notebook(server, "unchanged.ipynb")
    run(unchanged, "kept = 1")
    _, changed = open_notebook(server, "changed.ipynb")
    run(changed, "epoch = 1")
    report = hibernate(server, timeout=60)
    assert outcome(report, "unchanged.ipynb")["status"] == "saved"
    first = manifests(tmp)
    run(changed, "epoch = 2")  # a cell after the hub's save: this kernel's state is newer than its saved one

    terminate(server)

    after = manifests(tmp)
    assert after["unchanged.ipynb"]["saved_at"] == first["unchanged.ipynb"]["saved_at"]
    assert after["unchanged.ipynb"]["generation"] == first["unchanged.ipynb"]["generation"]
    assert after["changed.ipynb"]["saved_at"] > first["changed.ipynb"]["saved_at"]


def test_the_hubs_read_before_a_stop_is_not_a_page_the_answer_would_wait_for(
    fake_nvml_library: Path, tmp: Path, stopped: list[MeterServer]
) -> None:
    server = start(tmp, fake_nvml_library, None)
    stopped.append(server)
    train_notebook(server)

    # The hub's own first request before a user's stop (fracnb_spawner.hibernation.userstop), then the save.
    assert asyncio.run(first_answer(server.url, server.token, 10)) is Answer.READY
    asked = time.monotonic()
    report = hibernate(server, timeout=60)
    assert time.monotonic() - asked < report["seconds"] + NOTICE_WAIT_S  # no page read to wait for

    # A page's poll, by contrast: the answer waits (NOTICE_WAIT_S) for that page to read the outcome.
    assert server.request("fracnb/api/usage")[0] == 200
    asked = time.monotonic()
    hibernate(server, timeout=60)
    assert time.monotonic() - asked >= NOTICE_WAIT_S
