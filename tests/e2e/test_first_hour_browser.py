"""The first hour of a researcher and an admin, in a real browser set to another time zone than the hub's:
the spawn form readable in the hub's light and dark themes; an ordinary start told in plain words;
a queued server said to wait, not to hold a GPU, on the admin's page, which counts the slot kinds
the hub's choices use in GPU shares, names them as users do, links the right-sizing report (whose
downloads work with the browser's own login) and gives others a styled refusal; leaving the queue
confirmed; a server the service stopped explained on every hub page its user lands on; and the
demo's "one slot" choice making a second user wait.

One demo stack of its own, with short culling times; the checks are grouped into few page loads."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, expect

from fracnb_testbed.demo import RunningDemo
from fracnb_testbed.errors import TestbedError
from fracnb_testbed.handle import Testbed
from fracnb_testbed.procs import wait_until
from tests.gpu_jobs import SHARED, gpu_job

from .pages import SPAWN_TIMEOUT_MS, log_in, profile_row, shot
from .stack import answer_of, demo_with_fake_gpu

TOKEN = secrets.token_hex(16)
HUB_ZONE, BROWSER_ZONE = "Europe/Berlin", "America/New_York"
IDLE_TIMEOUT, WARNING_LEAD, CULL_EVERY, REPORT_LAG = 60, 30, 5, 10
GPU_NODE = "local-a100-ts4-0"
RAW_EVENT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \[(Normal|Warning)\]")
# Every headline the progress page shows, as the user sees it (innerText), and its event log, kept
# in the tab's session storage across page loads.
RECORD_PROGRESS = """
document.addEventListener("DOMContentLoaded", () => {
    const headline = document.getElementById("progress-message");
    const log = document.getElementById("progress-log");
    if (!headline || !log) return;
    const keep = (key, text) => {
        const seen = JSON.parse(sessionStorage.getItem(key) || "[]");
        seen.push(text);
        sessionStorage.setItem(key, JSON.stringify(seen));
    };
    new MutationObserver(() => keep("fracnb-headlines", headline.innerText))
        .observe(headline, {childList: true, characterData: true, subtree: true});
    new MutationObserver(() => keep("fracnb-log", log.textContent))  // the log is folded away: its text
        .observe(log, {childList: true, subtree: true});
});
"""
# WCAG contrast of an element's text against the background it is drawn on (alpha layers composited).
CONTRAST = """
element => {
    const parse = text => {
        const [r, g, b, a = 1] = text.match(/[\\d.]+/g).map(Number);
        return {r, g, b, a};
    };
    const over = (top, below) => ({
        r: top.r * top.a + below.r * (1 - top.a), g: top.g * top.a + below.g * (1 - top.a),
        b: top.b * top.a + below.b * (1 - top.a), a: 1,
    });
    const layers = [];
    for (let node = element; node && node.nodeType === 1; node = node.parentElement) {
        const background = parse(getComputedStyle(node).backgroundColor);
        if (background.a > 0) layers.push(background);
        if (background.a >= 1) break;
    }
    let base = {r: 255, g: 255, b: 255, a: 1};
    for (const layer of layers.reverse()) base = over(layer, base);
    const text = over(parse(getComputedStyle(element).color), base);
    const luminance = ({r, g, b}) => [r, g, b]
        .map(v => v / 255).map(v => v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4)
        .reduce((sum, v, i) => sum + v * [0.2126, 0.7152, 0.0722][i], 0);
    const [light, dark] = [luminance(text), luminance(base)].sort((x, y) => y - x);
    return (light + 0.05) / (dark + 0.05);
}
"""


@pytest.fixture(scope="module")
def first_hour(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDemo]:
    extra_config = "\n".join([
        "c.Spawner.args = ['--allow-root', '--FracnbMeter.activity_interval=5']",
        f"c.FracnbService.activity_report_lag = {REPORT_LAG}",
        f"c.FracnbQueue.display_timezone = {HUB_ZONE!r}",
        f"c.JupyterHub.services = [{{'name': 'e2e', 'api_token': {TOKEN!r}}}]",
        "c.JupyterHub.load_roles = [{'name': 'e2e', 'scopes': ['admin:users', 'admin:servers', 'tokens'],"
        " 'services': ['e2e']}]",
    ])  # fmt: skip
    timing = {"idle_timeout": IDLE_TIMEOUT, "warning_lead": WARNING_LEAD, "cull_every": CULL_EVERY}
    with demo_with_fake_gpu(
        testbed, tmp_path_factory.mktemp("first-hour"), extra_config=extra_config, **timing
    ) as demo:
        # Carol's CPU-only server, started now and left idle: the service stops it while the tests below run.
        call(demo, "hub/api/users/carol/server", method="POST", body={"profile": "cpu"})
        yield demo


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    made = browser.new_context(viewport={"width": 1300, "height": 900}, timezone_id=BROWSER_ZONE)
    yield made
    made.close()


def call(demo: RunningDemo, path: str, *, method: str = "GET", body: Any = None) -> Any:
    return answer_of(demo, path, TOKEN, method=method, body=body)


def server(demo: RunningDemo, user: str) -> dict[str, Any] | None:
    return call(demo, f"hub/api/users/{user}")["servers"].get("")


def contrast(locator) -> float:
    return locator.evaluate(CONTRAST)


def test_the_spawn_form_is_readable_in_light_and_dark(first_hour: RunningDemo, context: BrowserContext) -> None:
    page = context.new_page()
    log_in(page, first_hour, "ann")
    page.goto(f"{first_hour.settings.url}/hub/spawn")
    page.check('input[name=profile][value="quarter"]')
    quarter, half = profile_row(page, "quarter"), profile_row(page, "half")
    readable = {  # text a person must read (WCAG AA, 4.5:1)
        "quota line": page.locator("[data-fracnb-quota]"),
        "chosen card's name": quarter.locator("strong"),
        "chosen card's description": quarter.locator(".fracnb-description"),
        "chosen card's GPU line": quarter.locator(".fracnb-gpu"),
        "free count": quarter.locator(".fracnb-free"),
        "why a choice cannot start": half.locator(".fracnb-refused"),
    }
    greyed = half.locator("strong")  # a choice that cannot start: dimmed, still legible (3:1)
    for theme in ("light", "dark"):
        if page.locator("html").get_attribute("data-bs-theme") != theme:
            page.click("#dark-theme-toggle")  # the hub navbar's ◐
        expect(page.locator("html")).to_have_attribute("data-bs-theme", theme)
        shot(page, f"spawn-form-{theme}")
        low = {name: round(contrast(where), 2) for name, where in readable.items() if contrast(where) < 4.5}
        assert not low, f"{theme} theme: text below 4.5:1 contrast: {low}"
        assert contrast(greyed) >= 3, f"{theme} theme: a greyed-out choice's name at {contrast(greyed):.2f}:1"
    page.click("#dark-theme-toggle")  # back to light for the other tests' screenshots


def test_an_ordinary_start_reads_plainly(first_hour: RunningDemo, context: BrowserContext) -> None:
    page = context.new_page()
    page.add_init_script(RECORD_PROGRESS)
    log_in(page, first_hour, "ann")
    page.goto(f"{first_hour.settings.url}/hub/spawn")
    page.check('input[name=profile][value="quarter"]')
    page.click("form [type=submit]")
    page.wait_for_url(re.compile(r".*/user/ann/lab.*"), timeout=SPAWN_TIMEOUT_MS)
    headlines = page.evaluate("JSON.parse(sessionStorage.getItem('fracnb-headlines') || '[]')")
    events = page.evaluate("JSON.parse(sessionStorage.getItem('fracnb-log') || '[]')")
    assert headlines, "the progress page showed no headline"
    assert not [text for text in headlines if RAW_EVENT.search(text)], headlines
    assert any("took your server: starting it" in text for text in headlines), headlines
    # The event log keeps the cluster's own words.
    assert events
    assert RAW_EVENT.search(events[-1]), events[-1]
    call(first_hour, "hub/api/users/ann/server", method="DELETE")  # idle from now on: not for the culler


def fill_every_slot(demo: RunningDemo, testbed: Testbed) -> None:
    """Batch jobs on every 0.25 slot of the local A100, once the servers before have gone."""

    def holders() -> dict[str, int]:
        pods = testbed.get(f"/api/v1/pods?fieldSelector=spec.nodeName%3D{GPU_NODE}")["items"]
        return {
            f"{p['metadata']['namespace']}/{p['metadata']['name']}": int(
                (c.get("resources") or {}).get("limits", {}).get(SHARED, 0)
            )
            for p in pods
            if p["status"].get("phase") not in ("Succeeded", "Failed")
            for c in p["spec"]["containers"]
        }

    def in_use() -> int:
        return sum(holders().values())

    # A pod of another namespace is an earlier module's (the session-wide demo keeps its servers running):
    # this test needs the whole card, so it goes at once.
    for holder in holders():
        namespace, name = holder.split("/")
        if namespace != demo.settings.namespace:
            testbed.delete_pod(namespace, name, grace_seconds=0)
    # Generous: on a loaded machine a stopped server of an earlier test can take a while to go.
    try:
        wait_until(lambda: in_use() == 0, what="earlier servers to leave the local A100", timeout=180, interval=0.5)
    except TestbedError as error:
        raise TestbedError(f"{error}; still holding slots: {holders()}") from None
    for index in range(4):
        testbed.create_pod(demo.settings.namespace, gpu_job(f"batch-{index}"))
    wait_until(lambda: in_use() == 4, what="every slot of the local A100 taken", timeout=60, interval=0.5)


def test_a_queued_server_waits_visibly_and_leaving_the_queue_is_confirmed(
    first_hour: RunningDemo, testbed: Testbed, context: BrowserContext, browser: Browser
) -> None:
    demo = first_hour
    fill_every_slot(demo, testbed)
    log_lines_before = len(demo.log_file.read_text(errors="replace").splitlines())
    bob = context.new_page()
    log_in(bob, demo, "bob")
    bob.goto(f"{demo.settings.url}/hub/spawn")
    bob.check('input[name=profile][value="quarter"]')
    bob.click("form [type=submit]")
    headline = bob.locator("#progress-message")
    expect(headline).to_contain_text("Queued for a 0.25 GPU (time-slicing): 1st in line.", timeout=60_000)

    # The admin's page, while bob waits.
    admin_context = browser.new_context(viewport={"width": 1400, "height": 1000}, timezone_id=BROWSER_ZONE)
    try:
        admin = admin_context.new_page()
        log_in(admin, demo, "admin")
        admin.goto(f"{demo.settings.url}/services/fracnb/")
        kinds = admin.locator("section#kinds")
        expect(kinds).to_contain_text("0.25 GPU (time-slicing)")
        quarter_kind = kinds.locator("tr", has_text="0.25 GPU (time-slicing)")
        expect(quarter_kind).to_contain_text("0.25 GPU, Small GPU memory")
        cells = [cell.strip() for cell in quarter_kind.locator("td").all_inner_texts()]
        # One local A100 sliced 4 ways: 1 GPU, all of it in use, bob's quarter waiting, nothing free.
        assert cells[3:] == ["1", "1 GPU", "1 GPU", "0.25 GPU", "0 GPUs (0 servers)"], cells
        # Only the slot kinds the hub's choices use, on the nodes they select: not the testbed's other
        # GPU nodes, and not their resources' units.
        slots = [row.locator("td").first.inner_text() for row in kinds.locator("tr[data-fracnb-slot-kind]").all()]
        assert slots == ["0.25 GPU (time-slicing)", "0.25 GPU (mps)"], slots
        expect(kinds).not_to_contain_text("nvidia.com")
        expect(admin.locator("section#users tr", has_text="bob")).to_contain_text("0.25 GPU (waiting)")
        expect(admin.locator("section#groups tr", has_text="team-a")).to_contain_text("0.25 GPU (waiting)")
        queue_row = admin.locator("section#queue tr", has_text="bob")
        expect(queue_row).to_contain_text("0.25 GPU")  # the choice by its display name
        expect(queue_row).to_contain_text("0.25 GPU (time-slicing)")  # the slot kind in words
        expect(admin.locator("section#queue")).not_to_contain_text("nvidia.com-gpu")
        expect(admin.locator("body")).not_to_contain_text("(default)")
        # Times in the browser's zone (New York), not the hub's (Berlin).
        expect(admin.locator("main")).to_contain_text(re.compile(r"As of \d{4}-\d\d-\d\d \d\d:\d\d E[SD]T\."))
        shot(admin, "admin-page-with-a-waiting-server")
        # The report is linked, and its downloads work with the browser's own login.
        admin.click("text=Right-sizing report")
        expect(admin.locator("h1")).to_have_text("GPU right-sizing report")
        with admin.expect_download() as download:
            admin.click("text=CSV")
        assert download.value.suggested_filename == "fracnb-report.csv"
        assert Path(download.value.path()).read_text().startswith("profile,choice,label,")
        admin.click("text=JSON")
        assert set(json.loads(admin.locator("body").inner_text())) == {"headroom", "choices", "advice"}
    finally:
        admin_context.close()

    # His teammate's form says that his share only waits.
    ann_context = browser.new_context(timezone_id=BROWSER_ZONE)
    try:
        ann = ann_context.new_page()
        log_in(ann, demo, "ann")
        ann.goto(f"{demo.settings.url}/hub/spawn")
        expect(ann.locator("[data-fracnb-quota]")).to_contain_text("team-a (your team, together): 0.25 GPU (waiting)")
    finally:
        ann_context.close()

    # His hub home says that he waits, and where.
    home = bob.context.new_page()
    home.goto(f"{demo.settings.url}/hub/home")
    expect(home.locator(".announcement .fracnb-queued")).to_contain_text(
        "Your server is waiting in the GPU queue. Queued for a 0.25 GPU (time-slicing): "
    )
    home.close()

    # Bob leaves the queue from the progress page, and is told so where he lands.
    bob.click("#stop-server-btn")
    notice = bob.locator(".announcement")
    expect(notice).to_contain_text("You left the queue for a 0.25 GPU (time-slicing)", timeout=60_000)
    shot(bob, "left-the-queue")
    wait_until(lambda: server(demo, "bob") is None, what="bob's spawn to end", timeout=60)
    log = "\n".join(demo.log_file.read_text(errors="replace").splitlines()[log_lines_before:])
    assert "Redirect loop" not in log
    assert not re.search(r"\b424 GET /hub/user/bob", log), log[-3000:]
    # JupyterHub's progress stream logs "Server bob is ready" once as the spawn is cancelled; the page
    # does not follow it to a server that is not there (and back, to a 424).
    assert len(re.findall(r"\bbob\b.*\bready\b", log)) <= 1, log[-3000:]


def test_a_stopped_server_is_explained_wherever_its_user_lands(
    first_hour: RunningDemo, context: BrowserContext
) -> None:
    demo = first_hour
    wait_until(
        lambda: server(demo, "carol") is None, what="carol's idle server to be culled", timeout=IDLE_TIMEOUT + 120
    )
    page = context.new_page()
    log_in(page, demo, "carol")
    said = re.compile(
        rf"Your server was stopped for being idle for {IDLE_TIMEOUT // 60} min \(at \d\d:\d\d E[SD]T\)\. "
        r"Your saved files are kept\. Running kernels were shut down: their variables and anything not saved are lost\."
    )
    for where in ("hub/home", "user/carol/lab"):
        page.goto(f"{demo.settings.url}/{where}")
        expect(page.locator(".announcement")).to_contain_text(said)
        expect(page.locator(".announcement a", has_text="Start it again")).to_be_visible()
    expect(page.locator("body")).to_contain_text("Server not running")  # JupyterHub's own page, with the notice
    shot(page, "culled-server-not-running")
    page.goto(f"{demo.settings.url}/services/fracnb/")
    expect(page.locator("section#stopped")).to_contain_text(said)
    expect(page.locator("section#stopped h2")).to_have_text("Stopped by fracnb")
    # Started again, the notice is old news.
    call(demo, "hub/api/users/carol/server", method="POST", body={"profile": "cpu"})
    wait_until(lambda: (server(demo, "carol") or {}).get("ready"), what="carol's server again", timeout=120)
    page.goto(f"{demo.settings.url}/hub/home")
    expect(page.locator(".fracnb-stopped")).to_have_count(0)
    page.goto(f"{demo.settings.url}/services/fracnb/")
    expect(page.locator("section#stopped")).to_have_count(0)
    # She stops it herself: her pages tell this stop (nothing saved: a CPU server), not the older cull's; the
    # home she stopped it from shows it without her reloading.
    page.goto(f"{demo.settings.url}/hub/home")
    page.locator("#stop").click()
    own = page.locator(".announcement .fracnb-stopped")
    expect(own).to_be_visible(timeout=120_000)
    wait_until(lambda: server(demo, "carol") is None, what="carol's own stop", timeout=120)
    expect(own).to_contain_text(
        re.compile(r"Your server was stopped on request by you or an admin \(at \d\d:\d\d E[SD]T\)\. ")
    )
    expect(own).to_contain_text("Running kernels were shut down: their variables and anything not saved are lost.")
    expect(own).not_to_contain_text("for being idle")
    shot(page, "own-stop-notice")
    page.goto(f"{demo.settings.url}/services/fracnb/")  # not fracnb's doing: not headed as such
    expect(page.locator("section#stopped h2")).to_have_text("Your server was stopped")


def test_non_admins_get_a_styled_refusal_of_the_report(first_hour: RunningDemo, context: BrowserContext) -> None:
    page = context.new_page()
    log_in(page, first_hour, "carol")
    answer = page.goto(f"{first_hour.settings.url}/services/fracnb/report")
    assert answer is not None
    assert answer.status == 403
    expect(page.locator("h1")).to_have_text("GPU servers and quotas")
    expect(page.locator("section#error")).to_contain_text("The right-sizing report is for hub admins")
    expect(page.locator("section#error a", has_text="Your GPU servers and quota")).to_be_visible()


def test_the_one_slot_choice_makes_a_second_user_wait(first_hour: RunningDemo, context: BrowserContext) -> None:
    demo = first_hour
    call(demo, "hub/api/users/admin/server", method="POST", body={"profile": "one-slot"})
    wait_until(lambda: (server(demo, "admin") or {}).get("ready"), what="admin's one-slot server", timeout=120)
    page = context.new_page()
    log_in(page, demo, "carol")
    page.goto(f"{demo.settings.url}/hub/spawn")
    expect(profile_row(page, "one-slot")).to_contain_text(re.compile(r"queue: 0 waiting, about \d+ min"))
    page.check('input[name=profile][value="one-slot"]')
    page.click("form [type=submit]")
    expect(page.locator("#progress-message")).to_contain_text(
        re.compile(
            r"Queued for a 0\.25 GPU \(mps\): 1st in line\. Estimated start about \d\d:\d\d E[SD]T"
        ),  # the browser's zone
        timeout=60_000,
    )
    call(demo, "hub/api/users/carol/server", method="DELETE")
    call(demo, "hub/api/users/admin/server", method="DELETE")
