"""GPU-aware idle culling end to end, with short timeouts, in one idle timeout of real time: an idle 0.25 GPU
server is warned in JupyterLab, then culled by the fracnb service while its page stays open in a background
tab; back on that tab, the page says it was stopped for being idle and links to the hub home; and its slot is
free for the next user. All the while, a server computing in a silent cell for longer than the idle timeout is
neither warned nor culled."""

from __future__ import annotations

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

from .pages import log_in, profile_row, run_cell, set_tab_hidden, shot, start_profile
from .stack import answer_of, demo_with_fake_gpu

IDLE_TIMEOUT = 120
# A busy server is warned only if the hub missed its activity for IDLE_TIMEOUT - WARNING_LEAD = 90 s,
# eighteen of the meter's reports: margin enough for a heavily loaded two-core machine (at 30 s
# a busy server was once warned there).
WARNING_LEAD = 30
CULL_EVERY = 5
# The notebooks' meter reports activity every 5 s, so the hub hears of it within about 10 s:
# the timeouts above pass the start-up check (120 > 30 + 10, 30 > 10).
METER_ACTIVITY_INTERVAL = 5
ACTIVITY_REPORT_LAG = 10
TEST_TOKEN = secrets.token_hex(16)


@pytest.fixture(scope="module")
def short_demo(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDemo]:
    extra_config = "\n".join([
        f"c.Spawner.args = ['--allow-root', '--FracnbMeter.activity_interval={METER_ACTIVITY_INTERVAL}']",
        f"c.FracnbService.activity_report_lag = {ACTIVITY_REPORT_LAG}",
        # The test's own hub client: starts servers, reads their state, issues user tokens.
        f"c.JupyterHub.services = [{{'name': 'e2e', 'api_token': {TEST_TOKEN!r}}}]",
        "c.JupyterHub.load_roles = [{'name': 'e2e', 'scopes': ['admin:users', 'admin:servers', 'tokens'],"
        " 'services': ['e2e']}]",
    ])  # fmt: skip
    timing = {"idle_timeout": IDLE_TIMEOUT, "cull_every": CULL_EVERY, "warning_lead": WARNING_LEAD}
    with demo_with_fake_gpu(
        testbed, tmp_path_factory.mktemp("short-demo"), extra_config=extra_config, **timing
    ) as running:
        yield running


def call(demo: RunningDemo, path: str, *, method: str = "GET", body: Any = None, token: str = TEST_TOKEN) -> Any:
    return answer_of(demo, path, token, method=method, body=body)


def default_server(demo: RunningDemo, user: str) -> dict[str, Any] | None:
    return call(demo, f"hub/api/users/{user}")["servers"].get("")


def user_token(demo: RunningDemo, user: str) -> str:
    """A token of ``user``'s own (the scopes a notebook's token has), to ask the fracnb service."""
    return call(demo, f"hub/api/users/{user}/tokens", method="POST", body={"note": "e2e", "expires_in": 900})["token"]


def cull_status(demo: RunningDemo, token: str) -> dict[str, Any] | None:
    """The default server's culling status as the fracnb service tells the notebook (None: no server)."""
    return call(demo, "services/fracnb/api/me", token=token)["culling"].get("")


def warned(status: dict[str, Any] | None) -> bool:
    return bool(status and status["deadline"] and status["deadline"]["warning"])


def free_now(page: Page, demo: RunningDemo) -> int:
    page.goto(f"{demo.settings.url}/hub/spawn")
    text = profile_row(page, "quarter").inner_text()
    return int(re.search(r"(\d+) free now", text).group(1))


def expect_stopped_for_idleness(page: Page, demo: RunningDemo) -> None:
    """The open JupyterLab page of a culled server: the status bar, a toast and the panel say it
    was stopped for being idle, with a link to the hub home; no stale warning, no raw error."""
    # JupyterLab's own hub extension may also ask, in a modal dialog, whether to restart the
    # server, when and as often as its polls fail; she dismisses it to read the meter's notice.
    lab_dialog = page.locator(".jp-Dialog", has_text="Server unavailable or unreachable")
    lab_dialogs: list[str] = []

    def dismiss(dialog: Locator) -> None:
        lab_dialogs.append(dialog.inner_text())
        dialog.get_by_role("button", name="Dismiss").click()

    page.add_locator_handler(lab_dialog, dismiss)
    status = page.locator(".fracnb-meter-status")
    expect(status).to_have_text("Server stopped", timeout=30_000)
    headline = f"This server was stopped for being idle for {IDLE_TIMEOUT // 60} min."
    expect(status).to_have_attribute("title", re.compile(re.escape(headline)))
    toasts = page.locator(".Toastify__toast")
    expect(toasts.filter(has_text="will be stopped in")).to_have_count(0)
    stopped = toasts.filter(has_text="This server was stopped")
    expect(stopped).to_have_count(1)
    # The cull hibernated the server first (on by default); no kernel held variables, and the tab heard the
    # meter's report of that (its events socket outlives the proxy route), so it says so rather than "lost".
    expect(stopped).to_contain_text(f"{headline} Saved files are kept; no kernel held variables.")
    expect(stopped.get_by_role("button", name="Start it again")).to_be_visible()
    status.click()
    panel = page.locator("#fracnb-meter-panel .fracnb-meter-stopped")
    expect(panel).to_have_attribute("data-cause", "idle")
    expect(panel.locator(".fracnb-meter-stopped-headline")).to_have_text(headline)
    expect(panel.locator("a.fracnb-meter-hub-link")).to_have_attribute("href", "/hub/home")
    raw_error = re.compile(r"UsageRequestError|\b424\b|Failed Dependency")
    expect(page.locator("body")).not_to_contain_text(raw_error)
    assert not raw_error.search(status.get_attribute("title") or "")
    assert not any(raw_error.search(text) for text in lab_dialogs), lab_dialogs
    assert not lab_dialogs, f"JupyterHub's dialog spoke over fracnb's notice: {lab_dialogs}"
    wait_for_animations(page)
    shot(page, "culled-while-in-background")
    # The toast's action takes her to the hub home, where she can start the server again.
    stopped.get_by_role("button", name="Start it again").click()
    page.wait_for_url(f"{demo.settings.url}/hub/home")


def start_silent_cell(page: Page, demo: RunningDemo, user: str) -> datetime:
    """``user``'s server runs a cell that computes without a word for longer than the idle timeout; she then
    leaves for the hub home, so only the kernel is working. When the kernel took the cell."""
    log_in(page, demo, user)
    start_profile(page, demo, user, "quarter")
    page.locator('.jp-LauncherCard[data-category="Notebook"]').first.click()
    run_cell(page, f"import time\nprint('computing', flush=True)\ntime.sleep({IDLE_TIMEOUT * 3})")
    # The prompt shows "[*]" as soon as the page asks; only the cell's first output proves the
    # kernel took the request before she leaves (a request still queued in the page is lost).
    output = page.locator(".jp-Notebook .jp-Cell").last.locator(".jp-OutputArea-output")
    expect(output).to_contain_text("computing", timeout=60_000)
    started = datetime.now(timezone.utc)
    page.goto(f"{demo.settings.url}/hub/home")
    return started


def test_an_idle_server_is_warned_culled_and_its_slot_reused_while_a_silent_cell_keeps_its_own(
    short_demo: RunningDemo, page: Page
) -> None:
    """One idle timeout serves both halves: carol's idle server goes through warning, cull and the open tab's
    notice while ann's server, busy in a silent cell the whole time, is neither warned nor culled."""
    viewer = page.context.browser.new_context()
    trainer = page.context.browser.new_context()
    try:
        cell_started = start_silent_cell(trainer.new_page(), short_demo, "ann")
        ann = user_token(short_demo, "ann")

        def ann_kept() -> bool:
            status = cull_status(short_demo, ann)
            assert status is not None, "ann's server, busy in a silent cell, was stopped"
            assert not warned(status), f"ann's server, busy in a silent cell, was warned: {status}"
            return True

        admin = viewer.new_page()
        log_in(admin, short_demo, "admin")
        before = free_now(admin, short_demo)
        log_in(page, short_demo, "carol")
        start_profile(page, short_demo, "carol", "quarter")
        assert free_now(admin, short_demo) == before - 1
        # Carol switches to another tab: JupyterLab stops polling, so nothing uses the server.
        set_tab_hidden(page, hidden=True)
        carol = user_token(short_demo, "carol")
        wait_until(
            lambda: ann_kept() and warned(cull_status(short_demo, carol)),
            what="carol's server to be warned",
            timeout=IDLE_TIMEOUT + 60,
            interval=2,
        )
        # Back on the tab, within the warning lead of the idle deadline, JupyterLab tells her, with the time left.
        set_tab_hidden(page, hidden=False)
        warning = re.compile(r"Idle: this server will be stopped in \d+ minutes?")
        expect(page.locator(".Toastify__toast", has_text=warning).first).to_be_visible(timeout=30_000)
        # At once she goes back to the other tab, leaving JupyterLab open: nothing uses the server
        # now, and the page's last word from it is the warning (which names the idle timeout).
        set_tab_hidden(page, hidden=True)
        wait_for_animations(page)  # the toast has finished sliding in
        shot(page, "cull-warning")
        # The fracnb service stops it, and the slot is free again.
        wait_until(
            lambda: ann_kept() and default_server(short_demo, "carol") is None,
            what="carol's idle server to be culled",
            timeout=IDLE_TIMEOUT + 120,
            interval=2,
        )
        assert free_now(admin, short_demo) == before, "the culled server's slot was not given back"
        # Back on the tab, the page says why the server stopped and where to start it again.
        set_tab_hidden(page, hidden=False)
        expect_stopped_for_idleness(page, short_demo)
        # The next user gets that slot.
        start_profile(admin, short_demo, "admin", "quarter")
        expect(admin.locator(".fracnb-meter-status-text")).to_contain_text("/ 20 GiB", timeout=30_000)

        # Ann's cell outlasts the idle timeout (and the lag of the hub hearing of it), never warned.
        def cell_outlasted_the_timeout() -> bool:
            running_for = (datetime.now(timezone.utc) - cell_started).total_seconds()
            return ann_kept() and running_for > IDLE_TIMEOUT + ACTIVITY_REPORT_LAG + CULL_EVERY

        wait_until(cell_outlasted_the_timeout, what="ann's cell to outlast the idle timeout", timeout=IDLE_TIMEOUT)
        # The hub heard of ann's busy kernel while the cell ran, long after the last message it sent.
        last_activity = parse_timestamp(default_server(short_demo, "ann")["last_activity"])
        assert (last_activity - cell_started).total_seconds() > IDLE_TIMEOUT
    finally:
        viewer.close()
        trainer.close()
