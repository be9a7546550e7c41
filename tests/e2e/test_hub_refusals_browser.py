"""What a user sees when the hub refuses or cannot place a server, in a real browser: the spawn form,
the progress page and the error page say it in plain words, never as Python exception text; the
scheduler's own text stays in the progress page's event log.

A hub of its own (the demo's configuration plus the lines below) on the session testbed: team-a may
hold 1/4 GPU together, and "8 GPUs" fits exactly one KWOK node, so a second one waits for it."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator

import pytest
import requests
from playwright.sync_api import Page, expect

from fracnb_testbed.demo import PROFILES, DemoSettings, RunningDemo, free_port, running_demo
from fracnb_testbed.procs import wait_until

from .pages import log_in, profile_row, shot

TOKEN = secrets.token_hex(16)
# Without the queue (max_wait 0): this file checks the plain words of a spawn that finds no slot and fails.
EIGHT = {"display_name": "8 GPUs", "slug": "eight", "gpu": {"count": 8}, "queue": {"max_wait": 0}}
START_TIMEOUT = 25
EXTRA_CONFIG = f"""
c.JupyterHub.services = [{{"name": "e2e-admin", "api_token": {TOKEN!r}}}]
c.JupyterHub.load_roles = [{{"name": "admin", "services": ["e2e-admin"]}}]
c.KubeSpawner.node_selector = {{}}  # any node of the testbed: these servers never need to answer
c.Spawner.start_timeout = {START_TIMEOUT}
c.FractionalSpawner.profile_list = {[*PROFILES, EIGHT]!r}
c.FracnbQuotas.group_quotas = {{"team-a": "1/4"}}
c.FracnbQuotas.user_quotas = {{"dave": None, "erin": None}}
"""
USERS = {"ann": ["team-a"], "bob": ["team-a"], "carol": ["team-b"], "dave": [], "erin": []}
# What a user must never read: Python exception text, HTTP codes, the scheduler's own words.
RAW = re.compile(r"SpawnException|HTTP \d{3}|\(reason=|Traceback|nodes are available|didn't match")


@pytest.fixture(scope="module")
def hub(testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDemo]:
    namespace = testbed.create_namespace()
    settings = DemoSettings(
        state_dir=tmp_path_factory.mktemp("refusals-browser"),
        kubeconfig=testbed.kubeconfig,
        namespace=namespace,
        port=free_port(),
        users=dict(USERS),
        extra_config=EXTRA_CONFIG,
    )
    try:
        with running_demo(settings, testbed=testbed) as running:
            yield running
    finally:
        testbed.delete_namespace(namespace)


def api(hub: RunningDemo, method: str, path: str, **kwargs) -> requests.Response:
    headers = {"Authorization": f"token {TOKEN}"}
    return requests.request(method, f"{hub.settings.url}/hub/api{path}", headers=headers, timeout=60, **kwargs)


def wait_for_pod(hub: RunningDemo, user: str, *, bound: bool) -> None:
    testbed = hub.testbed
    assert testbed is not None

    def found() -> bool:
        return any(
            pod["metadata"]["name"] == f"jupyter-{user}" and (not bound or pod["spec"].get("nodeName"))
            for pod in testbed.list_pods(hub.settings.namespace)
        )

    wait_until(found, what=f"a {'bound ' if bound else ''}pod for {user}", timeout=60, interval=0.5)


def assert_plain(page: Page) -> None:
    text = page.locator("body").inner_text()
    assert not RAW.search(text), RAW.search(text)


def test_choice_no_node_offers_is_greyed_out_and_refused_at_once(hub: RunningDemo, page: Page) -> None:
    log_in(page, hub, "carol")
    page.goto(f"{hub.settings.url}/hub/spawn")
    half = profile_row(page, "half")
    expect(half).to_contain_text("no node in this cluster offers 0.5 GPU (time-slicing), so it cannot start")
    expect(half).to_have_class(re.compile(r"\bfracnb-unavailable\b"))
    expect(half.locator("input[name=profile]")).to_be_disabled()
    # It looks disabled: greyed, dashed, a not-allowed cursor (and the card of a choice that can start does not).
    style = half.evaluate("e => { const s = getComputedStyle(e); return [s.backgroundColor, s.borderStyle, s.cursor] }")
    # Greyed by the hub theme's own tertiary background (it follows the light and dark themes).
    tertiary = page.evaluate("""() => {
        const probe = document.body.appendChild(document.createElement("div"));
        probe.style.background = "var(--bs-tertiary-bg)";
        const colour = getComputedStyle(probe).backgroundColor;
        probe.remove();
        return colour;
    }""")
    assert style == [tertiary, "dashed", "not-allowed"]
    quarter = profile_row(page, "quarter").evaluate("e => getComputedStyle(e).cursor")
    assert quarter != "not-allowed"
    expect(profile_row(page, "quarter")).to_contain_text(re.compile(r"\d+ free now"))
    shot(page, "spawn-form-unavailable-choice")

    # A form opened before the node went away: the submit is refused at once, in plain words.
    page.evaluate("""() => {
        const radio = document.querySelector('input[name=profile][value="half"]');
        radio.disabled = false; radio.checked = true;
        document.querySelector("form [type=submit]").disabled = false;
    }""")
    started = time.monotonic()
    page.click("form [type=submit]")
    error = page.locator(".spawn-error-msg")
    expect(error).to_contain_text("No node in this cluster offers 0.5 GPU (time-slicing)", timeout=20_000)
    assert time.monotonic() - started < 20
    assert_plain(page)
    # The form keeps the choice (greyed, so the button waits for an available one) instead of "CPU only".
    expect(page.locator('input[name=profile][value="half"]')).to_be_checked()
    expect(page.locator("form [type=submit]")).to_be_disabled()
    page.check('input[name=profile][value="cpu"]')
    expect(page.locator("form [type=submit]")).to_be_enabled()
    page.check('input[name=profile][value="quarter"]')
    shot(page, "spawn-form-after-unavailable-refusal")
    assert hub.testbed is not None
    assert hub.testbed.list_pods(hub.settings.namespace) == []


def test_quota_line_and_a_race_lost_to_a_teammate(hub: RunningDemo, page: Page) -> None:
    log_in(page, hub, "bob")
    page.goto(f"{hub.settings.url}/hub/spawn")
    quota = page.locator("[data-fracnb-quota]")
    expect(quota).to_have_text(
        "Your GPU quota: 0 of 0.5 GPU in use · team-a (your team, together): 0 of 0.25 GPU in use"
    )
    page.check('input[name=profile][value="quarter"]')
    shot(page, "spawn-form-quota-line")

    # While bob's form is open, ann takes team-a's last share.
    answer = api(hub, "POST", "/users/ann/server", json={"profile": "quarter"})
    assert answer.status_code in (201, 202), answer.text
    try:
        wait_for_pod(hub, "ann", bound=False)
        page.click("form [type=submit]")
        error = page.locator(".spawn-error-msg")
        expect(error).to_contain_text(
            "Over GPU quota: team-a uses 0.25 of 0.25 GPU; this choice needs 0.25 GPU. "
            "Wait until a server of team-a stops, or ask a teammate in team-a to stop one.",
            timeout=20_000,
        )
        assert_plain(page)
        expect(quota).to_contain_text("team-a (your team, together): 0.25 of 0.25 GPU in use")
        kept = page.locator('input[name=profile][value="quarter"]')
        expect(kept).to_be_checked()
        expect(kept).to_be_disabled()
        expect(profile_row(page, "quarter")).to_have_class(re.compile(r"\bfracnb-unavailable\b"))
        shot(page, "spawn-form-quota-refusal")
    finally:
        api(hub, "DELETE", "/users/ann/server")


def test_progress_and_error_pages_speak_plainly(hub: RunningDemo, page: Page) -> None:
    # dave holds the only node with 8 free GPUs (a KWOK node: his server never answers, his pod stays).
    answer = api(hub, "POST", "/users/dave/server", json={"profile": "eight"})
    assert answer.status_code in (201, 202), answer.text
    try:
        wait_for_pod(hub, "dave", bound=True)
        log_in(page, hub, "erin")
        page.goto(f"{hub.settings.url}/hub/spawn")
        expect(profile_row(page, "eight")).to_contain_text("0 free now")
        page.check('input[name=profile][value="eight"]')
        page.click("form [type=submit]")
        page.wait_for_url(re.compile(r".*/hub/spawn-pending/erin.*"), timeout=30_000)
        headline = page.locator("#progress-message")
        waiting = "Waiting for 8 GPUs to be free: every matching GPU is in use right now."
        expect(headline).to_contain_text(waiting, timeout=30_000)
        page.locator("#progress-details summary").click()
        log = page.locator("#progress-log")
        expect(log).to_contain_text("nodes are available")  # the scheduler's words: in the event log only
        assert not RAW.search(headline.inner_text())
        shot(page, "progress-waiting-for-a-slot")

        failed = f"Spawn failed: No node could take 8 GPUs within {START_TIMEOUT} s: every matching GPU stayed in use."
        expect(headline).to_contain_text(failed, timeout=(START_TIMEOUT + 30) * 1000)
        assert not RAW.search(headline.inner_text())
        shot(page, "progress-failed")

        page.goto(f"{hub.settings.url}/user/erin/")
        expect(page.locator("body")).to_contain_text("No node could take 8 GPUs", timeout=20_000)
        assert_plain(page)
        shot(page, "error-page-after-failed-spawn")
    finally:
        api(hub, "DELETE", "/users/dave/server")
