"""States a researcher meets beside the everyday meter: a CPU-only server, the in-notebook
widget over budget, and the server stopped by the idle culler.

The CPU-only server is a second real ``jupyter lab`` with the pod environment the spawner
gives a CPU-only profile, on a node whose (fake) driver library is still loadable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Route, expect

from fracnb_meter.hubservice import report_from_me
from fracnb_testbed.procs import wait_until
from tests.browser.meter_lab import GIB, FakeGpu, LabServer, wait_for_animations
from tests.e2e.pages import run_cell
from tests.service_reports import IDLE_WARNING, ReportServer, report_blocking

pytestmark = pytest.mark.browser

STATUS = ".fracnb-meter-status"
PANEL = "#fracnb-meter-panel"
TOAST = ".Toastify__toast"
UPDATE_TIMEOUT_MS = 20_000
OVER_COLOUR = (0x6A, 0x1B, 0x9A)  # --fracnb-meter-over-color
HUB_PREFIX = "/hub/"
# Idle for 29 min 50 s of 30: the culler's deadline is 10 s away, and the warning is on.
IDLE_DUE = replace(IDLE_WARNING, idle_for=timedelta(minutes=29, seconds=50))


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 850})
    page = context.new_page()
    uncaught: list[str] = []
    page.on("pageerror", lambda error: uncaught.append(str(error)))
    yield page
    context.close()
    assert not uncaught, f"uncaught errors in the page: {uncaught}"


def rgb(colour: str) -> tuple[int, int, int]:
    red, green, blue = (int(part) for part in re.findall(r"\d+", colour)[:3])
    return (red, green, blue)


def test_a_cpu_only_server_says_it_has_no_gpu(
    page: Page, cpu_only_lab_server: LabServer, fake_gpu: FakeGpu, artifacts: Path
) -> None:
    server = cpu_only_lab_server
    # Somebody else's memory on the node's GPU, which a CPU-only server must not show.
    fake_gpu.set_kernel_memory(999_999, 7 * GIB)
    try:
        usage = server.usage()
        assert usage["available"] is False
        assert usage["gpus"] == []
        page.goto(f"{server.url}lab?reset&token={server.token}")
        status = page.locator(STATUS)
        expect(status).to_have_text("No GPU", timeout=60_000)
        expect(status).to_have_attribute("title", re.compile(r"^No GPU for this server"))
        status.click()
        panel = page.locator(PANEL)
        expect(panel.locator(".fracnb-meter-reason")).to_have_text(re.compile(r"^No GPU for this server"))
        expect(panel).to_contain_text("ProfileCPU only, no GPU visible")
        expect(panel).to_contain_text("Shareno GPU (CPU only)")
        expect(panel).not_to_contain_text(re.compile(r"GiB|A100|in use by all processes"))
        page.screenshot(path=artifacts / "lab-cpu-only.png")
        # NVML was never loaded into the server, so nothing of the node's GPU was read.
        assert "libnvidia-ml" not in Path(f"/proc/{server.pid}/maps").read_text()
    finally:
        fake_gpu.processes.pop(999_999)
        fake_gpu.write()


def test_the_widgets_kernel_bar_takes_the_server_bars_colours(
    page: Page, lab_server: LabServer, fake_gpu: FakeGpu, artifacts: Path
) -> None:
    notebook = "widget.ipynb"
    session = lab_server.start_notebook(notebook)
    kernel_id = session["kernel"]["id"]
    try:
        pid = lab_server.kernel_pid(kernel_id)
        fake_gpu.heal()
        fake_gpu.set_kernel_memory(pid, 24 * GIB)  # 120 % of the 20 GiB budget
        page.goto(f"{lab_server.url}lab/tree/{notebook}?reset&token={lab_server.token}")
        run_cell(page, "%load_ext fracnb_meter")
        label = page.locator(".jp-OutputArea-output .widget-html-content", has_text="GPU memory of your")
        expect(label).to_contain_text("GPU memory of your 0.25 GPU (simulated GPU): this kernel 24 GiB", timeout=60_000)
        expect(label).to_contain_text("over budget: on a shared GPU you are now using your neighbours' memory")
        bars = page.locator(".jp-OutputArea-output .widget-hprogress .progress-bar")
        expect(bars).to_have_count(2)
        colours = [rgb(bars.nth(i).evaluate("e => getComputedStyle(e).backgroundColor")) for i in range(2)]
        assert colours == [OVER_COLOUR, OVER_COLOUR]
        # The status bar shows the same state in the same colour.
        status = page.locator(STATUS)
        expect(status).to_have_class(re.compile(r"\bfracnb-meter-over\b"), timeout=UPDATE_TIMEOUT_MS)
        assert rgb(status.evaluate("e => getComputedStyle(e).backgroundColor")) == OVER_COLOUR
        page.locator(".jp-OutputArea-output").first.screenshot(path=artifacts / "widget-over-budget.png")
        page.screenshot(path=artifacts / "lab-widget.png")
    finally:
        fake_gpu.processes.clear()
        fake_gpu.write()
        lab_server.api("DELETE", f"api/sessions/{session['id']}")


def with_hub_page_options(route: Route) -> None:
    """The page options JupyterHub's single-user server adds, on the real lab page."""
    response = route.fetch()
    html = response.text()
    match = re.search(r'(<script id="jupyter-config-data" type="application/json">)(.*?)(</script>)', html, re.S)
    assert match, "the lab page has no jupyter-config-data"
    options = json.loads(match.group(2)) | {"hubPrefix": HUB_PREFIX, "hubHost": "", "hubUser": "ann"}
    html = html[: match.start(2)] + json.dumps(options) + html[match.end(2) :]
    route.fulfill(response=response, body=html)


def test_after_an_idle_shutdown_the_page_says_why_and_where_to_go(
    page: Page, lab_server: LabServer, service: ReportServer, artifacts: Path
) -> None:
    service.scenario = IDLE_DUE
    try:
        expected = report_from_me(report_blocking(IDLE_DUE), "")

        def carried() -> bool:
            usage = lab_server.usage()
            return (usage["quota"], usage["cull"]) == expected

        wait_until(
            carried, what="the usage document to carry the idle warning", timeout=UPDATE_TIMEOUT_MS / 1000, interval=0.1
        )
        page.route(re.compile(r"/lab(\?|$)"), with_hub_page_options)
        page.goto(f"{lab_server.url}lab?reset&token={lab_server.token}")
        warning = page.locator(TOAST, has_text="Idle: this server will be stopped")
        expect(warning).to_have_count(1, timeout=60_000)

        # The culler stops the server at the deadline: JupyterHub answers 424 for it from now on.
        page.route(
            re.compile(r"/fracnb/api/usage"),
            lambda route: route.fulfill(
                status=424,
                content_type="application/json",
                body=json.dumps({"status": 424, "message": "ann's server is not running"}),
            ),
        )
        status = page.locator(STATUS)
        expect(status).to_have_text("Server stopped", timeout=UPDATE_TIMEOUT_MS)
        expect(warning).to_have_count(0)  # the stale "stops in 1 minute" is withdrawn
        stopped = page.locator(TOAST, has_text="This server was stopped")
        expect(stopped).to_have_count(1)
        expect(stopped).to_contain_text("stopped for being idle for 30 min")
        expect(stopped).to_contain_text("Saved files are kept; running kernels and unsaved changes are lost.")
        expect(stopped.get_by_role("button", name="Start it again")).to_be_visible()

        status.click()
        panel = page.locator(PANEL)
        expect(panel.locator(".fracnb-meter-stopped-headline")).to_have_text(
            "This server was stopped for being idle for 30 min."
        )
        expect(panel).to_contain_text("Your saved files are kept. Running kernels were shut down")
        link = panel.locator("a.fracnb-meter-hub-link")
        expect(link).to_have_attribute("href", f"{HUB_PREFIX}home")
        brand = page.evaluate("getComputedStyle(document.body).getPropertyValue('--jp-brand-color1').trim()")
        assert link.evaluate("e => getComputedStyle(e).color") != page.locator(".fracnb-meter-note").first.evaluate(
            "e => getComputedStyle(e).color"
        ), f"the link reads like plain text (brand colour {brand})"
        for where in (page.locator("body"), status):
            expect(where).not_to_contain_text(re.compile(r"UsageRequestError|424|Failed Dependency"))
        assert not re.search(r"UsageRequestError|424", status.get_attribute("title") or "")
        wait_for_animations(page)  # the toast has finished sliding in before the screenshot
        page.screenshot(path=artifacts / "lab-after-idle-cull.png")
    finally:
        service.scenario = None


def test_a_busy_server_shows_no_idle_deadline_that_moves_on(
    page: Page, lab_server: LabServer, service: ReportServer
) -> None:
    """A running cell is use: the hub's idle deadline moves on with it and never comes. The panel says
    that the server is in use rather than a "Stops in" time that keeps moving."""
    service.scenario = IDLE_WARNING
    kernelspec = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    notebook = {"cells": [], "metadata": {"kernelspec": kernelspec}, "nbformat": 4, "nbformat_minor": 5}
    lab_server.api("PUT", "api/contents/busy.ipynb", {"type": "notebook", "content": notebook})
    try:
        wait_until(
            lambda: (lab_server.usage()["cull"] or {}).get("deadline") is not None,
            what="the usage document to carry the idle deadline",
            timeout=UPDATE_TIMEOUT_MS / 1000,
            interval=0.1,
        )
        page.goto(f"{lab_server.url}lab/tree/busy.ipynb?reset&token={lab_server.token}")
        page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first.wait_for(timeout=60_000)
        page.locator(STATUS).click()
        shutdown = page.locator(PANEL).locator(".fracnb-meter-section", has_text="Automatic shutdown")
        expect(shutdown).to_contain_text("Stops in", timeout=UPDATE_TIMEOUT_MS)
        run_cell(page, "import time\ntime.sleep(300)")
        expect(shutdown).to_contain_text("none while in use: a cell is running", timeout=UPDATE_TIMEOUT_MS)
        expect(shutdown).not_to_contain_text("Stops in")
    finally:
        service.scenario = None
        for session in lab_server.api("GET", "api/sessions"):
            if session["path"] == "busy.ipynb":
                lab_server.api("DELETE", f"api/sessions/{session['id']}")
