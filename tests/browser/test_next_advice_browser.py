"""This session's peak and the advice for next time in a real JupyterLab: the panel's "Next time"
section and the notebook widget show the peak of the simulated memory and the advice the service
gives (its own code, in the stand-in of tests/service_reports.py), as it changes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.meter_lab import BUDGET_ENV, GIB, FakeGpu, LabServer, gpu_environment, running_lab
from tests.e2e.pages import run_cell
from tests.service_reports import ReportServer, past_session

pytestmark = pytest.mark.browser

UPDATE_TIMEOUT_MS = 20_000
ADVICE = "Your last 3 sessions on 0.25 GPU peaked at 4 GiB or less. 1/8 GPU (10 GiB) would have fit."


@pytest.fixture(scope="module")
def advice_service() -> Iterator[ReportServer]:
    """The service of this module's server alone: no other test's sessions reach its advice."""
    service = ReportServer.start()
    yield service
    service.stop()


@pytest.fixture(scope="module")
def advice_lab(
    tmp_path_factory: pytest.TempPathFactory, fake_gpu: FakeGpu, advice_service: ReportServer, artifacts: Path
) -> Iterator[LabServer]:
    environment = {**BUDGET_ENV, **advice_service.environment(), **gpu_environment(fake_gpu)}
    log = artifacts / "jupyter-lab-advice.log"
    # The server's own session is reported only at its stop: the tests choose every session the advice reads.
    with running_lab(tmp_path_factory.mktemp("advice-lab"), environment, log, {"session_report_interval": 0}) as lab:
        yield lab


@pytest.fixture
def notebook(advice_lab: LabServer, fake_gpu: FakeGpu) -> Iterator[tuple[str, int]]:
    name = "advice.ipynb"
    session = advice_lab.start_notebook(name)
    pid = advice_lab.kernel_pid(session["kernel"]["id"])
    yield name, pid
    fake_gpu.processes.pop(pid, None)
    fake_gpu.write()
    advice_lab.api("DELETE", f"api/sessions/{session['id']}")


@contextmanager
def lab_page(browser: Browser, lab: LabServer, path: str) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 850})
    try:
        page = context.new_page()
        page.goto(f"{lab.url}lab/{path}?reset&token={lab.token}")
        yield page
    finally:
        context.close()


def test_the_panel_shows_the_sessions_peak_and_the_advice_as_it_comes(
    browser: Browser,
    advice_lab: LabServer,
    advice_service: ReportServer,
    fake_gpu: FakeGpu,
    notebook: tuple[str, int],
) -> None:
    _name, pid = notebook
    advice_service.earlier_sessions = [past_session(peak_bytes=4 * GIB), past_session(peak_bytes=3 * GIB)]
    fake_gpu.heal()
    fake_gpu.set_kernel_memory(pid, 6 * GIB)
    with lab_page(browser, advice_lab, "") as page:
        page.locator(".fracnb-meter-status").click()
        panel = page.locator("#fracnb-meter-panel")
        peak, advice = panel.locator(".fracnb-meter-session-peak"), panel.locator(".fracnb-meter-advice")
        expect(peak).to_have_text("This session peaked at 6 GiB of 20 GiB.", timeout=UPDATE_TIMEOUT_MS)
        # Two earlier sessions (this server's own is reported at its stop only, here).
        expect(advice).to_have_text("No advice yet: 3 sessions needed (2 so far).", timeout=UPDATE_TIMEOUT_MS)

        advice_service.earlier_sessions.append(past_session(peak_bytes=2 * GIB))
        fake_gpu.set_kernel_memory(pid, 2 * GIB)
        expect(advice).to_have_text(ADVICE, timeout=UPDATE_TIMEOUT_MS)
        expect(peak).to_have_text("This session peaked at 6 GiB of 20 GiB.")  # the peak stays

        # Sessions that needed most of the budget: nothing smaller fits, nothing to say, the line goes.
        advice_service.earlier_sessions = [past_session(peak_bytes=12 * GIB)] * 3
        expect(advice).to_have_count(0, timeout=UPDATE_TIMEOUT_MS)
        expect(peak).to_be_visible()


def test_the_widget_shows_the_same_peak_and_advice(
    browser: Browser, advice_lab: LabServer, advice_service: ReportServer, fake_gpu: FakeGpu, notebook: tuple[str, int]
) -> None:
    name, pid = notebook
    advice_service.earlier_sessions = [past_session(peak_bytes=p * GIB) for p in (4, 3, 2)]
    fake_gpu.heal()
    fake_gpu.set_kernel_memory(pid, 5 * GIB)
    with lab_page(browser, advice_lab, f"tree/{name}") as page:
        run_cell(page, "from fracnb_meter.widget import show; meter = show(interval=0.5)")
        lines = page.locator(".jp-OutputArea-output .fracnb-meter-next-time")
        expect(lines.first).to_have_text("This session peaked at 5 GiB of 20 GiB.", timeout=UPDATE_TIMEOUT_MS)
        expect(lines.nth(1)).to_have_text(ADVICE, timeout=UPDATE_TIMEOUT_MS)
