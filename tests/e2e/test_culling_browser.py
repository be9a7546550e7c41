"""GPU-aware idle culling end to end: with a short idle timeout, an idle 0.25 GPU server is warned
in JupyterLab, then culled by the fracnb service, and its slot is free for the next user."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from fracnb_testbed.demo import DemoSettings, RunningDemo, free_port, prepare_fake_gpu, running_demo
from fracnb_testbed.handle import Testbed

from .pages import log_in, profile_row, shot, start_profile

IDLE_TIMEOUT = 60
WARNING_LEAD = 50


@pytest.fixture(scope="module")
def short_demo(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDemo]:
    state_dir = tmp_path_factory.mktemp("short-demo")
    previous_env = testbed.runner_env()
    testbed.set_runner_env({**previous_env, **prepare_fake_gpu(state_dir / "fakenvml")})
    namespace = testbed.create_namespace()
    settings = DemoSettings(
        state_dir=state_dir, kubeconfig=testbed.kubeconfig, namespace=namespace, port=free_port(),
        idle_timeout=IDLE_TIMEOUT, cull_every=5, warning_lead=WARNING_LEAD,
    )  # fmt: skip
    try:
        with running_demo(settings, testbed=testbed) as running:
            yield running
    finally:
        testbed.set_runner_env(previous_env)
        testbed.delete_namespace(namespace)


def free_now(page: Page, demo: RunningDemo) -> int:
    page.goto(f"{demo.settings.url}/hub/spawn")
    text = profile_row(page, "quarter").inner_text()
    return int(re.search(r"(\d+) free now", text).group(1))


def test_idle_server_is_warned_culled_and_its_slot_reused(short_demo: RunningDemo, page: Page) -> None:
    viewer = page.context.browser.new_context()
    try:
        admin = viewer.new_page()
        log_in(admin, short_demo, "admin")
        before = free_now(admin, short_demo)
        log_in(page, short_demo, "carol")
        start_profile(page, short_demo, "carol", "quarter")
        assert free_now(admin, short_demo) == before - 1
        # Within the warning lead of the idle deadline, JupyterLab tells the user, with the time left.
        warning = re.compile(r"Idle: this server will be stopped in \d+ minutes?")
        expect(page.locator(".Toastify__toast", has_text=warning).first).to_be_visible(timeout=60_000)
        shot(page, "cull-warning")
        page.goto(f"{short_demo.settings.url}/hub/home")  # carol leaves; nothing uses the server now
        # The fracnb service stops it, and the slot is free again.
        deadline = time.monotonic() + IDLE_TIMEOUT + 120
        while time.monotonic() < deadline and free_now(admin, short_demo) < before:
            time.sleep(3)
        assert free_now(admin, short_demo) == before, "the culled server's slot was not given back"
        # The next user gets that slot.
        start_profile(admin, short_demo, "admin", "quarter")
        expect(admin.locator(".fracnb-meter-status-text")).to_contain_text("/ 20 GiB", timeout=30_000)
    finally:
        viewer.close()
