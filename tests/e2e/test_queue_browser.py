"""The GPU queue through a real hub and browser: with every 0.25 slot of the local A100 taken
(filler pods and carol's server), ann's spawn form says there is a queue; she starts anyway, the
progress page shows her place and an estimate in her browser's time zone (New York's, the hub's is
Berlin's) with no "taking longer"
headline and no scheduler jargon; when carol's server stops, ann's starts and the page goes on
to JupyterLab. Bob, queued the same way, leaves the queue with "Stop My Server" and leaves no pod."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Page, expect

from fracnb_spawner.common.podkeys import QUEUED_AT_ANNOTATION, has_queue_gate
from fracnb_testbed import hubproc
from fracnb_testbed.demo import RunningDemo, start_hub
from fracnb_testbed.handle import Testbed
from fracnb_testbed.procs import wait_until
from tests.gpu_jobs import SHARED, gpu_job

from .pages import SPAWN_TIMEOUT_MS, log_in, profile_row, shot
from .stack import answer_of, demo_with_fake_gpu

GPU_NODE = "local-a100-ts4-0"  # the testbed's local A100, time-sliced 4 ways
ZONE = "Europe/Berlin"
BROWSER_ZONE = "America/New_York"  # of the conftest's page: the hub's times are shown in it
USERS = ("ann", "bob", "carol")
TEST_TOKEN = secrets.token_hex(16)
JARGON = re.compile(r"taking longer than expected|Preemption|nodes are available|Insufficient", re.IGNORECASE)
# Every headline the progress page shows, kept in the tab's session storage across page loads.
RECORD_HEADLINES = """
document.addEventListener("DOMContentLoaded", () => {
    const headline = document.getElementById("progress-message");
    if (!headline) return;
    const record = () => {
        const seen = JSON.parse(sessionStorage.getItem("fracnb-headlines") || "[]");
        seen.push(headline.textContent);
        sessionStorage.setItem("fracnb-headlines", JSON.stringify(seen));
    };
    new MutationObserver(record).observe(headline, {childList: true, characterData: true, subtree: true});
});
"""


@pytest.fixture(scope="module")
def queue_demo(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDemo]:
    extra_config = "\n".join([
        f"c.FracnbQueue.display_timezone = {ZONE!r}",
        # KubeSpawner's "taking longer than expected" after 1 s and every second after: the queue
        # headline must take its place the whole time.
        "c.FractionalSpawner.slow_spawn_message_threshold = 1",
        "c.FractionalSpawner.slow_spawn_message_frequency = 1",
        # As in Zero-to-JupyterHub: a hub that stops leaves the servers (and queued pods) in place.
        "c.JupyterHub.cleanup_servers = False",
        # The fallback without the fracnb service's resuming (tests/faults covers the resume): after a hub
        # restart the form offers the kept place back.
        "c.FracnbService.resume_every = 0",
        f"c.JupyterHub.services = [{{'name': 'e2e', 'api_token': {TEST_TOKEN!r}}}]",
        "c.JupyterHub.load_roles = [{'name': 'e2e', 'scopes': ['admin:users', 'admin:servers'], 'services': ['e2e']}]",
    ])  # fmt: skip
    with demo_with_fake_gpu(testbed, tmp_path_factory.mktemp("queue-demo"), extra_config=extra_config) as running:
        try:
            yield running
        finally:
            hubproc.stop(running.hub)  # the hub a test restarted


@pytest.fixture(autouse=True)
def no_server_left(queue_demo: RunningDemo, testbed: Testbed) -> Iterator[None]:
    """Each test ends with none of its users' servers running, passed or failed: a failure is its own, not
    the next test's ("earlier servers to stop")."""
    yield
    for user in USERS:
        if server(queue_demo, user) is not None:
            call(queue_demo, f"users/{user}/server", method="DELETE")
    wait_until(
        lambda: all(server(queue_demo, user) is None for user in USERS),
        what="the tests' servers to stop",
        timeout=120,
        interval=1,
    )


def call(demo: RunningDemo, path: str, *, method: str = "GET", body: Any = None) -> Any:
    return answer_of(demo, f"hub/api/{path}", TEST_TOKEN, method=method, body=body)


def server(demo: RunningDemo, user: str) -> dict[str, Any] | None:
    return call(demo, f"users/{user}")["servers"].get("")


def slots_in_use(testbed: Testbed) -> int:
    """0.25 slots of the local A100 held by pods of any namespace (other tests' servers too)."""
    pods = testbed.get(f"/api/v1/pods?fieldSelector=spec.nodeName%3D{GPU_NODE}")["items"]
    return sum(
        int((container.get("resources") or {}).get("limits", {}).get(SHARED, 0))
        for pod in pods
        if pod["status"].get("phase") not in ("Succeeded", "Failed")
        for container in pod["spec"]["containers"]
    )


def take_all_but_one_slot(testbed: Testbed, namespace: str) -> None:
    free = 4 - slots_in_use(testbed)
    assert free >= 1, "another test left every slot of the local A100 taken"
    for index in range(free - 1):
        testbed.create_pod(namespace, gpu_job(f"gpu-job-{index}"))
    wait_until(lambda: slots_in_use(testbed) == 3, what="the filler jobs to be placed", timeout=60, interval=0.5)


def start_by_api(demo: RunningDemo, user: str) -> None:
    call(demo, f"users/{user}/server", method="POST", body={"profile": "quarter"})
    wait_until(lambda: (server(demo, user) or {}).get("ready"), what=f"{user}'s server", timeout=180, interval=1)


def queue_from_the_form(page: Page, demo: RunningDemo, user: str) -> None:
    """Log in, read the form's queue line for 0.25 GPU, start it and wait for the queue headline."""
    log_in(page, demo, user)
    page.goto(f"{demo.settings.url}/hub/spawn")
    quarter = profile_row(page, "quarter")
    expect(quarter).to_contain_text(re.compile(r"queue: \d+ waiting"))
    expect(quarter).not_to_contain_text("free now")
    page.check('input[name=profile][value="quarter"]')
    page.click("form [type=submit]")
    page.wait_for_url(re.compile(rf".*/hub/spawn-pending/{user}.*"))
    expect(page.locator("#progress-message")).to_contain_text("Queued for a 0.25 GPU (time-slicing)", timeout=60_000)


def pod_of(testbed: Testbed, namespace: str, user: str) -> dict | None:
    return next((p for p in testbed.list_pods(namespace) if p["metadata"]["name"] == f"jupyter-{user}"), None)


def fill_every_slot(demo: RunningDemo, testbed: Testbed) -> None:
    """Filler jobs and carol's idle server on every 0.25 slot of the local A100."""
    wait_until(lambda: slots_in_use(testbed) <= 3, what="earlier servers to stop", timeout=60, interval=0.5)
    if slots_in_use(testbed) < 3:
        take_all_but_one_slot(testbed, demo.settings.namespace)
    start_by_api(demo, "carol")


def restart_hub(demo: RunningDemo) -> None:
    hubproc.stop(demo.hub)
    demo.hub = start_hub(demo.settings, demo.log_file)
    hubproc.wait_ready(demo.settings.url, demo.hub, demo.log_file)


def test_queued_user_sees_place_and_estimate_then_gets_the_freed_slot(
    queue_demo: RunningDemo, testbed: Testbed, page: Page
) -> None:
    namespace = queue_demo.settings.namespace
    fill_every_slot(queue_demo, testbed)  # carol's idle server: the culler is due to stop it within 15 min
    page.add_init_script(RECORD_HEADLINES)
    queue_from_the_form(page, queue_demo, "ann")
    assert has_queue_gate(pod_of(testbed, namespace, "ann"))
    zone = datetime.now(ZoneInfo(BROWSER_ZONE)).tzname()
    headline = page.locator("#progress-message")
    expect(headline).to_have_text(
        re.compile(
            rf"Queued for a 0\.25 GPU \(time-slicing\): 1st in line\. Estimated start about \d\d:\d\d {zone}, "
            r"in \d{1,2} min: an idle 0\.25 GPU server is due to be stopped then\. Stop the server to leave the queue\."
        )
    )
    shot(page, "queued-progress")
    # Carol stops her server: its slot goes to ann, whose page goes on to JupyterLab.
    call(queue_demo, "users/carol/server", method="DELETE")
    page.wait_for_url(re.compile(r".*/user/ann/lab.*"), timeout=SPAWN_TIMEOUT_MS)
    page.wait_for_selector(".jp-LabShell", timeout=60_000)
    headlines = page.evaluate("JSON.parse(sessionStorage.getItem('fracnb-headlines') || '[]')")
    assert any(text.startswith("Queued for a 0.25 GPU (time-slicing): 1st in line.") for text in headlines)
    assert not [text for text in headlines if JARGON.search(text)], headlines
    call(queue_demo, "users/ann/server", method="DELETE")


def test_stop_my_server_while_queued_leaves_the_queue_and_no_pod(
    queue_demo: RunningDemo, testbed: Testbed, page: Page
) -> None:
    namespace = queue_demo.settings.namespace
    fill_every_slot(queue_demo, testbed)
    queue_from_the_form(page, queue_demo, "bob")
    assert has_queue_gate(pod_of(testbed, namespace, "bob"))
    page.goto(f"{queue_demo.settings.url}/hub/home")
    page.click("#stop")
    expect(page.locator("#start")).to_be_visible(timeout=60_000)
    wait_until(
        lambda: pod_of(testbed, namespace, "bob") is None, what="bob's queued pod to go", timeout=30, interval=0.5
    )
    # The hub's stop ends once its watch has seen the pod go (KubeSpawner looks with a growing backoff).
    wait_until(lambda: server(queue_demo, "bob") is None, what="the hub to end bob's stop", timeout=30, interval=0.5)
    # A server that never ran was not asked to save anything.
    assert "hibernation of bob before its stop" not in queue_demo.log_file.read_text(errors="replace")
    # His place is gone too: the slot carol frees goes to nobody, and the form shows it free.
    call(queue_demo, "users/carol/server", method="DELETE")
    wait_until(lambda: "free now" in form_line(page, queue_demo), what="a free slot on the form", timeout=60)
    assert pod_of(testbed, namespace, "bob") is None


def form_line(page: Page, demo: RunningDemo) -> str:
    page.goto(f"{demo.settings.url}/hub/spawn")
    return profile_row(page, "quarter").inner_text()


def test_restarted_hub_keeps_the_place_and_the_form_offers_it_back(
    queue_demo: RunningDemo, testbed: Testbed, page: Page
) -> None:
    namespace = queue_demo.settings.namespace
    fill_every_slot(queue_demo, testbed)
    call(queue_demo, "users/ann/server", method="POST", body={"profile": "quarter"})
    wait_until(lambda: has_queue_gate(pod_of(testbed, namespace, "ann") or {}), what="ann's pod queued", timeout=60)
    queued_at = pod_of(testbed, namespace, "ann")["metadata"]["annotations"][QUEUED_AT_ANNOTATION]
    restart_hub(queue_demo)
    # The restarted hub forgets the pending spawn at once; her pod keeps its place in the queue.
    wait_until(lambda: server(queue_demo, "ann") is None, what="the hub to forget ann's spawn", timeout=60)
    kept = pod_of(testbed, namespace, "ann")
    assert has_queue_gate(kept)
    assert kept["metadata"]["annotations"][QUEUED_AT_ANNOTATION] == queued_at
    # The form tells her, and starting the same choice again takes the place back.
    log_in(page, queue_demo, "ann")
    page.goto(f"{queue_demo.settings.url}/hub/spawn")
    zone = datetime.now(ZoneInfo(BROWSER_ZONE)).tzname()
    expect(page.locator("[data-fracnb-queue-place]")).to_have_text(
        re.compile(
            rf"Your place in the GPU queue is kept until \d\d:\d\d {zone}, in (59 min|1 h): "
            r"start the same choice again to rejoin it\."
        )
    )
    shot(page, "queue-place-kept-after-restart")
    page.check('input[name=profile][value="quarter"]')
    page.click("form [type=submit]")
    expect(page.locator("#progress-message")).to_contain_text("1st in line", timeout=60_000)
    assert pod_of(testbed, namespace, "ann")["metadata"]["annotations"][QUEUED_AT_ANNOTATION] == queued_at
    call(queue_demo, "users/carol/server", method="DELETE")
    page.wait_for_url(re.compile(r".*/user/ann/lab.*"), timeout=SPAWN_TIMEOUT_MS)
    call(queue_demo, "users/ann/server", method="DELETE")
