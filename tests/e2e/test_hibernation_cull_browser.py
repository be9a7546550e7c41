"""Hibernate, don't cull, end to end on the demo stack in Chromium, with short timeouts.

Carol computes in a notebook and leaves JupyterLab open and visible, untouched: its polling no longer
counts as use, so her idle 0.25 GPU server is warned and, at its idle deadline, the fracnb service asks
it to save her variables and stops it. The open tab then says what was saved; her fracnb page says it
too. On her next start, opening the notebook offers "Restore variables from ...", and Restore brings
them back. Bob's kernel, busy in a long silent cell on his own server, is untouched throughout. The
hub also hibernates at the stops users ask for (``hibernate_on_stop``): her stop on request (the hub's
REST API, which "Stop My Server" calls) saves her variables again, her open notebook's tab says so
(from the server's event: no poll reaches a server the hub is stopping), and a cull is not saved twice.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from fracnb_spawner.culling import parse_timestamp
from fracnb_testbed.demo import RunningDemo
from fracnb_testbed.handle import Testbed
from fracnb_testbed.procs import wait_until
from tests.browser.meter_lab import wait_for_animations

from .pages import log_in, run_cell, shot, start_profile
from .stack import answer_of, demo_with_fake_gpu, request

IDLE_TIMEOUT = 60
WARNING_LEAD = 25
CULL_EVERY = 3
# The meter reports activity and use every 5 s: the hub and the service hear of them within 10 s.
METER_ACTIVITY_INTERVAL = 5
ACTIVITY_REPORT_LAG = 10
TEST_TOKEN = secrets.token_hex(16)
NOTEBOOK = "train.ipynb"
TOAST = ".Toastify__toast"


@pytest.fixture(scope="module")
def short_demo(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDemo]:
    extra_config = "\n".join([
        f"c.Spawner.args = ['--allow-root', '--FracnbMeter.activity_interval={METER_ACTIVITY_INTERVAL}']",
        f"c.FracnbService.activity_report_lag = {ACTIVITY_REPORT_LAG}",
        "c.FractionalSpawner.hibernate_on_stop = True",
        f"c.JupyterHub.services = [{{'name': 'e2e', 'api_token': {TEST_TOKEN!r}}}]",
        "c.JupyterHub.load_roles = [{'name': 'e2e', 'scopes': ['admin:users', 'admin:servers', 'tokens',"
        " 'access:servers'], 'services': ['e2e']}]",
    ])  # fmt: skip
    timing = {"idle_timeout": IDLE_TIMEOUT, "cull_every": CULL_EVERY, "warning_lead": WARNING_LEAD}
    with demo_with_fake_gpu(
        testbed, tmp_path_factory.mktemp("hibernation-demo"), extra_config=extra_config, **timing
    ) as running:
        yield running


def call(demo: RunningDemo, path: str, *, method: str = "GET", body: Any = None) -> Any:
    return answer_of(demo, path, TEST_TOKEN, method=method, body=body)


def default_server(demo: RunningDemo, user: str) -> dict[str, Any] | None:
    return call(demo, f"hub/api/users/{user}")["servers"].get("")


def write_notebook(demo: RunningDemo, user: str) -> None:
    notebook = {"cells": [], "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)",
                "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}  # fmt: skip
    status, answer = request(demo, f"user/{user}/api/contents/{NOTEBOOK}", TEST_TOKEN, method="PUT",
                             body={"type": "notebook", "content": notebook})  # fmt: skip
    assert status in (200, 201), answer


def open_notebook(page: Page, demo: RunningDemo, user: str) -> None:
    page.goto(f"{demo.settings.url}/user/{user}/lab/tree/{NOTEBOOK}")
    page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first.wait_for(timeout=90_000)


def saved_state(demo: RunningDemo, user: str) -> dict[str, Any]:
    """The manifest of the user's one saved state, in their home on the cluster's homes volume."""
    assert demo.testbed is not None
    [manifest] = demo.testbed.state.homes_dir.rglob(f"{user}/.local/state/fracnb/hibernation/default/*/manifest.json")
    return json.loads(manifest.read_text())


def user_token(demo: RunningDemo, user: str) -> str:
    return call(demo, f"hub/api/users/{user}/tokens", method="POST", body={"note": "e2e", "expires_in": 900})["token"]


def kernel_states(demo: RunningDemo, user: str) -> list[str]:
    return [kernel["execution_state"] for kernel in call(demo, f"user/{user}/api/kernels")]


def dismiss_labs_restart_dialog(page: Page) -> None:
    """JupyterLab's own "Server unavailable" dialog comes when its polls fail; she dismisses it."""

    def dismiss(dialog: Locator) -> None:
        dialog.get_by_role("button", name="Dismiss").click()

    page.add_locator_handler(page.locator(".jp-Dialog", has_text="Server unavailable or unreachable"), dismiss)


def start_bobs_busy_kernel(page: Page, demo: RunningDemo) -> None:
    log_in(page, demo, "bob")
    start_profile(page, demo, "bob", "quarter")
    page.locator('.jp-LauncherCard[data-category="Notebook"]').first.click()
    run_cell(page, "import time\nprint('computing', flush=True)\ntime.sleep(3600)")
    output = page.locator(".jp-Notebook .jp-Cell").last.locator(".jp-OutputArea-output")
    expect(output).to_contain_text("computing", timeout=60_000)
    page.goto(f"{demo.settings.url}/hub/home")  # bob leaves; his kernel computes on


def test_an_idle_servers_variables_survive_its_cull_with_its_tab_open(short_demo: RunningDemo, page: Page) -> None:
    demo = short_demo
    bobs = page.context.browser.new_context()
    try:
        start_bobs_busy_kernel(bobs.new_page(), demo)
        log_in(page, demo, "carol")
        start_profile(page, demo, "carol", "quarter")
        write_notebook(demo, "carol")
        open_notebook(page, demo, "carol")
        dismiss_labs_restart_dialog(page)
        run_cell(page, "weights = [0.5] * 250_000\nnotes = {'epoch': 7}\nlog = open('run.log', 'w')")
        page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first.wait_for(timeout=60_000)
        last_use = datetime.now(timezone.utc)

        # She leaves the tab open and visible: JupyterLab and the meter poll it all along, and the hub
        # hears of that as activity; the idle deadline counts from her last cell all the same.
        seen = {"hub activity": last_use, "warned": False}

        def culled() -> bool:
            server = default_server(demo, "carol")
            if server is None:
                return True
            seen["hub activity"] = max(seen["hub activity"], parse_timestamp(server["last_activity"]))
            return False

        # The warning says that her variables will be saved (the service's hibernation is on).
        warning = re.compile(
            r"Idle: this server will be stopped in \d+ minutes? unless you use it\. "
            r"Its variables will be saved for your next start\."
        )
        expect(page.locator(TOAST, has_text=warning)).to_be_visible(timeout=(IDLE_TIMEOUT + 30) * 1000)
        wait_for_animations(page)
        shot(page, "hibernation-warning-with-tab-open")
        wait_until(culled, what="carol's idle server to be culled", timeout=IDLE_TIMEOUT + 90, interval=1)
        assert page.evaluate("document.visibilityState") == "visible"
        polled_for = (seen["hub activity"] - last_use).total_seconds()
        assert polled_for > IDLE_TIMEOUT / 2, f"the hub heard of the open tab for only {polled_for:.0f} s"

        # The hub log says so: the service's cull and the hibernation before it.
        hub_log = demo.log_file.read_text(errors="replace")
        assert "Culled the default server of 'carol' (idle, HTTP " in hub_log
        assert re.search(
            r"Hibernation of the default server of 'carol' before its stop \(idle\): partly-saved in ", hub_log
        )

        # The open tab says why it stopped and what was saved.
        status = page.locator(".fracnb-meter-status")
        expect(status).to_have_text("Server stopped", timeout=60_000)
        headline = f"This server was stopped for being idle for {IDLE_TIMEOUT // 60} min."
        toast = page.locator(TOAST, has_text="This server was stopped")
        expect(toast).to_contain_text(f"{headline} Your variables were saved: open the notebook again to restore them.")
        status.click()
        saved = page.locator("#fracnb-meter-panel .fracnb-meter-stopped-saved")
        expect(saved).to_have_count(1)
        expect(saved).to_have_text(re.compile(
            # The variable's name is set as code: no backtick is shown.
            r"^Variables of train\.ipynb saved at \d\d:\d\d \w+: [\d.]+ [KM]iB, 2 variables; 1 skipped: log \(an open file\)\.$"
        ))  # fmt: skip
        wait_for_animations(page)
        shot(page, "hibernation-stopped-notice")

        # Her fracnb page says the same.
        page.goto(f"{demo.settings.url}/services/fracnb/")
        stops = page.locator("#stopped")
        expect(stops).to_contain_text("idle")
        expect(stops.locator(".hibernation")).to_have_text(re.compile(r"^Variables of train\.ipynb saved at "))
        shot(page, "hibernation-service-page")
        # And the hub's own pages, from the same record.
        page.goto(f"{demo.settings.url}/hub/home")
        notice = page.locator(".announcement .fracnb-stopped")
        expect(notice).to_contain_text(
            f"Your server was stopped for being idle for {IDLE_TIMEOUT // 60} min (at "
        )  # fmt: skip
        expect(notice).to_contain_text("Your saved files are kept, and the variables listed here")
        expect(notice).to_contain_text("Variables of train.ipynb saved at ")
        expect(notice.locator("code", has_text="log")).to_have_count(1)  # a skipped variable's name, not `log`
        expect(notice).not_to_contain_text("`")

        # The spawn form starts her back on the 1/4 GPU her variables were saved on, not the default "CPU only".
        page.goto(f"{demo.settings.url}/hub/spawn")
        expect(page.locator('input[name=profile][value="quarter"]')).to_be_checked()
        expect(page.locator(".fracnb-preselected")).to_have_text(
            re.compile(r"^Preselected: the choice of your server, whose variables were saved when it stopped at ")
        )
        shot(page, "hibernation-spawn-form-preselected")

        # The service's hibernation is the one on disk: the spawner's stop that followed did not save again.
        stopped = answer_of(demo, "services/fracnb/api/me", user_token(demo, "carol"))["stopped"][""]
        [kernel] = stopped["hibernation"]["kernels"]
        culled_state = saved_state(demo, "carol")
        assert culled_state["saved_at"] == kernel["saved_at"]

        # Bob's busy kernel was never touched.
        assert default_server(demo, "bob") is not None
        assert kernel_states(demo, "bob") == ["busy"]

        # Her next start: the notebook offers her variables back.
        start_profile(page, demo, "carol", "quarter")
        open_notebook(page, demo, "carol")
        offer = page.locator(TOAST, has_text=re.compile(r"train\.ipynb: Restore variables from \d\d:\d\d \S+ \("))
        expect(offer).to_be_visible(timeout=60_000)
        wait_for_animations(page)
        shot(page, "hibernation-restore-offer")
        offer.get_by_role("button", name="Restore", exact=True).click()
        expect(page.locator(TOAST, has_text="Restored 2 variables")).to_be_visible(timeout=60_000)
        run_cell(page, "print(len(weights), notes['epoch'])")
        expect(page.locator(".jp-Notebook .jp-Cell").last.locator(".jp-OutputArea-output")).to_have_text(
            "250000 7", timeout=30_000
        )
        assert kernel_states(demo, "bob") == ["busy"]

        # Her server is stopped on request (the hub's REST API, as "Stop My Server" asks it) while her
        # notebook is open here: with hibernate_on_stop, her variables are saved again first. JupyterHub
        # takes the server off its proxy before that, so no poll reaches it; the tab learns what was saved
        # from the server's event, on the socket it opened before, with why the hub stopped it.
        call(demo, "hub/api/users/carol/server", method="DELETE")
        wait_until(lambda: default_server(demo, "carol") is None, what="carol's server to stop", timeout=120)
        own_stop = page.locator(TOAST, has_text="This server was stopped on request by you or an admin.")
        expect(own_stop).to_contain_text("Your variables were saved: open the notebook again to restore them.",
                                         timeout=60_000)  # fmt: skip
        page.locator(".fracnb-meter-status").click()
        expect(page.locator("#fracnb-meter-panel .fracnb-meter-stopped-saved")).to_have_text(
            re.compile(r"^Variables of train\.ipynb saved at \d\d:\d\d \w+: [\d.]+ [KM]iB, \d+ variables[;.]")
        )
        wait_for_animations(page)
        shot(page, "hibernation-own-stop-tab")
        stopped_state = saved_state(demo, "carol")
        assert stopped_state["saved_at"] > culled_state["saved_at"]
        assert {"weights", "notes"} <= {variable["name"] for variable in stopped_state["variables"]}
        hub_log = demo.log_file.read_text(errors="replace")
        assert re.search(r"fracnb: hibernation of carol\S* before its stop: (partly-)?saved in ", hub_log)
        # Her hub home tells this stop, not the cull before it: what it saved, and when.
        page.goto(f"{demo.settings.url}/hub/home")
        notice = page.locator(".announcement .fracnb-stopped")
        expect(notice).to_contain_text(
            re.compile(r"Your server was stopped on request by you or an admin \(at \d\d:\d\d \w+\)\.")
        )
        expect(notice).not_to_contain_text("for being idle")
        expect(notice).to_contain_text("Your saved files are kept, and the variables listed here")
        shot(page, "hibernation-own-stop-notice")
    finally:
        bobs.close()
        for user in ("bob", "carol"):
            request(demo, f"hub/api/users/{user}/server", TEST_TOKEN, method="DELETE")
