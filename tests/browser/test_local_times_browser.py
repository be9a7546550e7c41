"""Times on the hub's pages in the reader's own zone: the stop notice as the hub's announcement renders it
(with its script), in Chromium with the browser's zone set; without JavaScript, the hub's zone."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Browser

from fracnb_spawner.common.timehtml import LOCAL_TIMES_SCRIPT, moment_html
from fracnb_spawner.history.stopnotices import StopNotice, hibernation_lines_html, notice_html

pytestmark = pytest.mark.browser

STOPPED = datetime(2026, 1, 15, 0, 37, tzinfo=timezone.utc)
BERLIN = ZoneInfo("Europe/Berlin")


def page_with(content: str) -> str:
    return f"<!DOCTYPE html><html><body><div class='announcement'>{content}</div></body></html>"


@pytest.mark.parametrize(
    ("browser_zone", "clock"),
    [("America/New_York", "19:37 EST"), ("Asia/Tokyo", "09:37 GMT+9"), ("UTC", "00:37 UTC")],
)
def test_the_stop_notice_says_the_time_in_the_browsers_zone(browser: Browser, browser_zone: str, clock: str) -> None:
    notice = StopNotice("ann", "", STOPPED, "idle", 900)
    html = page_with(str(notice_html(notice, "/hub/spawn", BERLIN)) + f"<p id='as-of'>{moment_html(STOPPED)}</p>")
    context = browser.new_context(timezone_id=browser_zone, locale="en-US")
    try:
        page = context.new_page()
        page.set_content(html)
        assert f"Your server was stopped for being idle for 15 min (at {clock})." in page.inner_text(".announcement")
        date = "2026-01-14" if browser_zone == "America/New_York" else "2026-01-15"
        assert page.inner_text("#as-of") == f"{date} {clock}"
    finally:
        context.close()


def test_without_javascript_the_hubs_zone_is_said(browser: Browser) -> None:
    notice = StopNotice("ann", "", STOPPED, "idle", 900)
    context = browser.new_context(timezone_id="America/New_York", java_script_enabled=False)
    try:
        page = context.new_page()
        page.set_content(page_with(str(notice_html(notice, "/hub/spawn", BERLIN))))
        assert "(at 01:37 CET)." in page.inner_text(".announcement")
    finally:
        context.close()
    assert str(LOCAL_TIMES_SCRIPT).count("<script>") == 1


def test_a_saves_time_is_said_in_the_browsers_zone_with_its_abbreviation(browser: Browser) -> None:
    # Saved in the same minute as the stop: each time is its own <time>, none nested in another.
    kernel = {"path": "train.ipynb", "status": "saved", "bytes": 1024, "variables": 2, "skipped": [],
              "saved_at": "2026-01-15T00:37:02+00:00"}  # fmt: skip
    notice = StopNotice("ann", "", STOPPED, "user", details={"hibernation": {"kernels": [kernel]}})
    html = page_with(str(notice_html(notice, "/hub/spawn", BERLIN)))
    html += "".join(f"<div class='hibernation'>{line}</div>" for line in hibernation_lines_html(notice, BERLIN))
    context = browser.new_context(timezone_id="America/New_York", locale="en-US")
    try:
        page = context.new_page()
        page.set_content(html)
        shown = page.inner_text(".announcement")
        assert "Your server was stopped on request by you or an admin (at 19:37 EST)." in shown
        assert "Variables of train.ipynb saved at 19:37 EST: 1 KiB, 2 variables." in shown
        assert page.inner_text(".hibernation") == "Variables of train.ipynb saved at 19:37 EST: 1 KiB, 2 variables."
        assert page.locator("time time").count() == 0
    finally:
        context.close()
