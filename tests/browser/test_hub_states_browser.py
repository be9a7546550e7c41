"""Quota and culling states in JupyterLab, from the reports the hub's fracnb service really makes.

Each scenario of tests/service_reports.py is turned into an ``api/me`` answer by the service's
own code; the real server extension fetches it, checks it against the schema and passes it on
in its usage document; the panel and the notifications show it. Nothing on the way is a
hand-made shape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from fracnb_meter.hubservice import report_from_me
from fracnb_meter.wording import cull_warning
from fracnb_spawner.queue.kueue.quota import TeamQuota, borrowing_note
from fracnb_testbed.procs import wait_until
from tests.browser.meter_lab import LabServer, wait_for_polls
from tests.service_reports import (
    DEMAND_WARNING,
    IDLE_WARNING,
    MAX_AGE_WARNING,
    NO_QUOTA,
    UNLIMITED_NEVER_CULLED,
    ReportServer,
    Scenario,
    report_blocking,
)

pytestmark = pytest.mark.browser

UPDATE_TIMEOUT_MS = 20_000
TOAST = ".Toastify__toast"
PANEL = "#fracnb-meter-panel"
# What a panel must never show, whatever the hub reports.
NONSENSE = re.compile(r"null|NaN|undefined|Infinity|\b0 min")


@pytest.fixture(scope="module")
def page(browser: Browser, lab_server: LabServer, service: ReportServer) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 850})
    page = context.new_page()
    uncaught: list[str] = []
    page.on("pageerror", lambda error: uncaught.append(str(error)))
    page.goto(f"{lab_server.url}lab?reset&token={lab_server.token}")
    expect(page.locator(".fracnb-meter-status")).to_be_visible(timeout=60_000)
    page.locator(".fracnb-meter-status").click()
    expect(page.locator(PANEL)).to_be_visible()
    yield page
    service.scenario = None
    context.close()
    assert not uncaught, f"uncaught errors in the page: {uncaught}"


def section(page: Page, heading: str) -> Locator:
    return page.locator(f"{PANEL} .fracnb-meter-section", has=page.locator("h3", has_text=heading))


def show(lab_server: LabServer, service: ReportServer, scenario: Scenario) -> dict:
    """Make the service answer with ``scenario``; return the usage document the page will show."""
    service.scenario = scenario
    expected = report_from_me(report_blocking(scenario), "")

    def carried() -> dict | None:
        usage = lab_server.usage()  # checked against the schema
        return usage if (usage["quota"], usage["cull"]) == expected else None

    # The meter re-samples at most every 0.2 s.
    return wait_until(
        carried,
        what=f"the usage document to carry the report of {scenario}",
        timeout=UPDATE_TIMEOUT_MS / 1000,
        interval=0.1,
    )


def test_no_report_shows_no_quota_and_no_shutdown(page: Page, lab_server: LabServer, service: ReportServer) -> None:
    service.scenario = None
    assert lab_server.usage()["quota"] is None
    expect(section(page, "Budget")).to_be_visible(timeout=UPDATE_TIMEOUT_MS)
    expect(section(page, "Quota")).to_have_count(0)
    expect(section(page, "Automatic shutdown")).to_have_count(0)


def test_limited_quota_and_the_idle_warning(
    page: Page, lab_server: LabServer, service: ReportServer, artifacts: Path
) -> None:
    show(lab_server, service, IDLE_WARNING)
    toasts = page.locator(TOAST, has_text="Idle: this server will be stopped")
    expect(toasts).to_have_count(1, timeout=UPDATE_TIMEOUT_MS)
    expect(toasts).to_contain_text("in 4 minutes unless you use it.")
    quota = section(page, "Quota")
    expect(quota).to_contain_text("You0.25 of 1 GPU")
    expect(quota).to_contain_text("team-a5.75 of 6 GPUs")
    shutdown = section(page, "Automatic shutdown")
    expect(shutdown).to_contain_text("Stops in4 min unless used")
    expect(shutdown).to_contain_text("When idlestops after 30 min without activity")
    expect(shutdown).to_have_class(re.compile(r"\bfracnb-meter-cull-warning\b"))
    expect(page.locator(PANEL)).not_to_contain_text(NONSENSE)
    page.screenshot(path=artifacts / "lab-cull-warning.png")
    # More polls with the same shutdown time raise no second notification.
    wait_for_polls(page, 3)
    expect(toasts).to_have_count(1)


def test_no_quota_and_an_idle_deadline_without_warning(
    page: Page, lab_server: LabServer, service: ReportServer
) -> None:
    show(lab_server, service, NO_QUOTA)
    expect(section(page, "Quota")).to_contain_text("You0.25 GPU, no quota", timeout=UPDATE_TIMEOUT_MS)
    # The warning of the test before no longer holds: its notification is withdrawn.
    expect(page.locator(TOAST, has_text="Idle: this server will be stopped")).to_have_count(0)
    shutdown = section(page, "Automatic shutdown")
    expect(shutdown).to_contain_text("Stops in20 min unless used")
    expect(shutdown).not_to_have_class(re.compile(r"\bfracnb-meter-cull-warning\b"))
    expect(page.locator(PANEL)).not_to_contain_text(NONSENSE)


def test_unlimited_quota_and_a_server_never_culled(
    page: Page, lab_server: LabServer, service: ReportServer, artifacts: Path
) -> None:
    usage = show(lab_server, service, UNLIMITED_NEVER_CULLED)
    assert usage["cull"]["deadline"] is None
    expect(section(page, "Quota")).to_contain_text("You0.25 GPU, unlimited", timeout=UPDATE_TIMEOUT_MS)
    shutdown = section(page, "Automatic shutdown")
    expect(shutdown).to_contain_text("When idlenever stopped")
    expect(shutdown).to_contain_text("Maximum agenone")
    expect(shutdown).to_contain_text("Next stopnone scheduled")
    expect(shutdown).not_to_contain_text("Stops in")
    expect(page.locator(PANEL)).not_to_contain_text(NONSENSE)
    page.screenshot(path=artifacts / "lab-unlimited-never-culled.png")


def test_a_max_age_shutdown_is_not_avoided_by_use(
    page: Page, lab_server: LabServer, service: ReportServer, artifacts: Path
) -> None:
    show(lab_server, service, MAX_AGE_WARNING)
    toasts = page.locator(TOAST, has_text="maximum age")
    expect(toasts).to_have_count(1, timeout=UPDATE_TIMEOUT_MS)
    expect(toasts).to_contain_text("will be stopped in 4 minutes, even if in use. Save your work.")
    expect(toasts).not_to_contain_text("unless")
    expect(page.locator(TOAST, has_text="Idle:")).to_have_count(0)
    shutdown = section(page, "Automatic shutdown")
    expect(shutdown).to_contain_text("Stops in4 min at its maximum age, even if used")
    expect(shutdown).to_contain_text("Maximum age8 h after start")
    expect(shutdown).not_to_contain_text("unless used")
    expect(shutdown).to_have_class(re.compile(r"\bfracnb-meter-cull-warning\b"))
    expect(page.locator(PANEL)).not_to_contain_text(NONSENSE)
    page.screenshot(path=artifacts / "lab-max-age-warning.png")


def test_an_idle_server_is_warned_that_someone_waits_for_a_gpu(
    page: Page, lab_server: LabServer, service: ReportServer, artifacts: Path
) -> None:
    usage = show(lab_server, service, DEMAND_WARNING)
    deadline = usage["cull"]["deadline"]
    assert (deadline["reason"], deadline["seconds_left"]) == ("demand", 240)
    # The browser and this test run on one machine: the same local time, in the same words.
    expected = cull_warning(deadline)
    assert expected is not None
    assert expected.startswith("Someone is waiting for a GPU; this idle server stops at ")
    toasts = page.locator(TOAST, has_text="Someone is waiting for a GPU")
    expect(toasts).to_have_count(1, timeout=UPDATE_TIMEOUT_MS)
    expect(toasts).to_contain_text(expected)
    expect(page.locator(TOAST, has_text="Idle:")).to_have_count(0)
    shutdown = section(page, "Automatic shutdown")
    expect(shutdown).to_contain_text("Stops in4 min unless used: someone is waiting for a GPU")
    expect(shutdown).to_have_class(re.compile(r"\bfracnb-meter-cull-warning\b"))
    expect(page.locator(PANEL)).not_to_contain_text(NONSENSE)
    page.screenshot(path=artifacts / "lab-demand-warning.png")


def test_a_server_on_lent_kueue_quota_says_kueue_can_preempt_it(
    page: Page, lab_server: LabServer, service: ReportServer
) -> None:
    """The service's ``borrowing`` (with Kueue, while the user's team runs on quota its cohort lent)."""
    words = borrowing_note(TeamQuota("team-a", 250, 500, 0, 0, "university"))
    assert words is not None
    service.raw = json.dumps({**report_blocking(NO_QUOTA), "borrowing": words}).encode()
    try:
        wait_until(lambda: (lab_server.usage()["quota"] or {}).get("borrowing") == words,
                   what="the usage document to carry the borrowing words", timeout=UPDATE_TIMEOUT_MS / 1000)  # fmt: skip
        expect(section(page, "Quota").locator(".fracnb-meter-borrowing")).to_have_text(words, timeout=UPDATE_TIMEOUT_MS)
    finally:
        service.raw = None
    show(lab_server, service, NO_QUOTA)
    expect(section(page, "Quota").locator(".fracnb-meter-borrowing")).to_have_count(0, timeout=UPDATE_TIMEOUT_MS)
