"""Right-sizing end to end on the demo stack: a user's real sessions on 0.25 GPU (three servers
started, used and stopped, their meters reporting with each server's own token) turn into advice
in the notebook's panel and on the spawn form; an admin reads the report page; the user cannot
read another user's records, and another user's advice is not made from them."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from fracnb_testbed.demo import RunningDemo
from fracnb_testbed.handle import Testbed
from fracnb_testbed.procs import wait_until

from .pages import log_in, run_cell, shot, start_profile
from .stack import demo_with_fake_gpu, request

TOKEN = secrets.token_hex(16)
USERS = {"dana": [], "erin": [], "admin": []}
EXTRA_CONFIG = f"""
c.JupyterHub.services = [{{"name": "e2e-admin", "api_token": {TOKEN!r}}}]
c.JupyterHub.load_roles = [{{"name": "admin", "services": ["e2e-admin"]}}]
# Reports every 5 s rather than every minute, so that the test need not wait for a server's stop.
c.Spawner.args = ["--allow-root", "--FracnbMeter.session_report_interval=5"]
"""
ADVICE = "Your last 3 sessions on 0.25 GPU peaked at 4 GiB or less. Small GPU memory (10 GiB) would have fit"
SERVER_TIMEOUT = 180


@pytest.fixture(scope="module")
def sizing_demo(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDemo]:
    """A demo of its own: only this module's users' sessions reach its history."""
    with demo_with_fake_gpu(
        testbed, tmp_path_factory.mktemp("right-sizing"), users=USERS, extra_config=EXTRA_CONFIG
    ) as running:
        yield running


def call(demo: RunningDemo, path: str, *, method: str = "GET", body: Any = None, token: str = TOKEN) -> tuple[int, Any]:
    return request(demo, path, token, method=method, body=body)


def token_of(demo: RunningDemo, user: str, scopes: list[str]) -> str:
    status, body = call(demo, f"hub/api/users/{user}/tokens", method="POST", body={"scopes": scopes})
    assert status == 201, body
    return body["token"]


def server(demo: RunningDemo, user: str) -> dict[str, Any] | None:
    return call(demo, f"hub/api/users/{user}")[1]["servers"].get("")


def measured_sessions(demo: RunningDemo, user: str, admin: str) -> list[dict[str, Any]]:
    """The user's stored sessions with a known peak, as a hub admin reads them."""
    status, body = call(demo, f"services/fracnb/api/users/{user}/sessions", token=admin)
    assert status == 200, body
    return [s for s in body["sessions"] if s["peak_bytes"] is not None]


def stop(demo: RunningDemo, user: str) -> None:
    assert call(demo, f"hub/api/users/{user}/server", method="DELETE")[0] in {202, 204}
    wait_until(lambda: server(demo, user) is None, what=f"{user}'s server to stop", timeout=SERVER_TIMEOUT)


def idle_session(demo: RunningDemo, user: str, admin: str) -> None:
    """A real session on 0.25 GPU that uses no GPU memory: started, read once, reported, stopped."""
    before = len(measured_sessions(demo, user, admin))
    assert call(demo, f"hub/api/users/{user}/server", method="POST", body={"profile": "quarter"})[0] in {201, 202}
    wait_until(lambda: (server(demo, user) or {}).get("ready"), what=f"{user}'s server", timeout=SERVER_TIMEOUT)
    assert call(demo, f"user/{user}/fracnb/api/usage")[0] == 200  # a reading: the session's peak is known
    wait_until(lambda: len(measured_sessions(demo, user, admin)) > before, what="the session's report", timeout=60)
    stop(demo, user)


def test_sessions_become_advice_in_the_panel_and_on_the_form_and_admins_see_the_report(
    sizing_demo: RunningDemo, browser: Browser, page: Page
) -> None:
    demo = sizing_demo
    admin = token_of(demo, "admin", ["inherit"])
    # The service opens its database once it listens (503 until then).
    history = "services/fracnb/api/users/dana/sessions"
    wait_until(lambda: call(demo, history, token=admin)[0] != 503, what="the session history to open", timeout=60)
    for _ in range(2):
        idle_session(demo, "dana", admin)

    # The third session, in the browser: 4 GiB in a notebook; the panel shows the peak and the advice.
    log_in(page, demo, "dana")
    start_profile(page, demo, "dana", "quarter")
    page.locator('.jp-LauncherCard[data-category="Notebook"]').first.click()
    run_cell(page, 'import fracnb_meter.simulate as sim\nsim.allocate("4GiB")')
    page.locator(".fracnb-meter-status").click()
    panel = page.locator("#fracnb-meter-panel")
    expect(panel.locator(".fracnb-meter-session-peak")).to_have_text(
        "This session peaked at 4 GiB of 20 GiB.", timeout=60_000
    )
    # Once this session is reported (every 5 s here) and the meter asks again (every 15 s): 3 sessions.
    expect(panel.locator(".fracnb-meter-advice")).to_have_text(f"{ADVICE}.", timeout=90_000)
    shot(page, "right-sizing-panel")
    stop(demo, "dana")

    # The spawn form says the same, and whether the smaller choice is free.
    page.goto(f"{demo.settings.url}/hub/spawn")
    line = page.locator("[data-fracnb-advice]")
    expect(line).to_have_text(re.compile(rf"^{re.escape(ADVICE)}(: it's free now| \(none is free right now\))\.$"))
    shot(page, "right-sizing-form")

    # An admin reads the report page: 3 sessions on quarter.
    context = browser.new_context()
    try:
        admin_page = context.new_page()
        log_in(admin_page, demo, "admin")
        admin_page.goto(f"{demo.settings.url}/services/fracnb/report")
        quarter = admin_page.locator('#choices tr[data-fracnb-choice^="quarter "]')
        expect(quarter.locator("td.num").first).to_have_text("3", timeout=30_000)
        # The report advises what dana's form and panel advise: one rule in both places.
        expect(quarter).to_contain_text("Small GPU memory (fits 100 %)")
        expect(admin_page.locator("#advice")).to_contain_text("users are advised Small GPU memory (10 GiB)")
        shot(admin_page, "right-sizing-report")
    finally:
        context.close()

    # Another user sees only their own: dana cannot read erin's records, nor erin dana's, and
    # erin's advice for 0.25 GPU is made from erin's sessions (none).
    dana = token_of(demo, "dana", ["access:services!service=fracnb"])
    erin = token_of(demo, "erin", ["access:services!service=fracnb"])
    assert call(demo, "services/fracnb/api/users/erin/sessions", token=dana)[0] == 403
    assert call(demo, "services/fracnb/api/users/dana/sessions", token=erin)[0] == 403
    assert call(demo, "services/fracnb/api/report", token=dana)[0] == 403
    assert call(demo, "services/fracnb/api/sessions", token=erin)[1]["sessions"] == []
    assert len(call(demo, "services/fracnb/api/sessions", token=dana)[1]["sessions"]) == 3
    status, advice = call(demo, "services/fracnb/api/advice?profile=quarter", token=erin)
    assert (status, advice) == (200, {"state": "waiting", "text": "No advice yet: 3 sessions needed (0 so far)."})
