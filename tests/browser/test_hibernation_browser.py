"""A researcher's variables across a stop, in a real JupyterLab driven by headless Chromium.

The user computes in a notebook; the server is asked to hibernate (as the hub's service does
before an idle stop) and is stopped. A new server starts on the same home folder; when the
notebook opens in its new kernel, JupyterLab offers "Restore variables from 14:05 (...)", and
a click brings the variables back into that kernel.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.blocking import BlockingKernelClient
from playwright.sync_api import Browser, Page, expect

from fracnb_meter.schema import HIBERNATION_REPORT, HIBERNATION_STATES, problems
from fracnb_testbed.procs import wait_until
from tests.browser.meter_lab import BUDGET_ENV, FakeGpu, LabServer, gpu_environment, running_lab, wait_for_animations
from tests.e2e.pages import run_cell

pytestmark = pytest.mark.browser

NOTEBOOK = "train.ipynb"
CLASSIC = "classic.ipynb"  # opened in Notebook 7
TOAST = ".Toastify__toast"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 850})
    page = context.new_page()
    uncaught: list[str] = []
    page.on("pageerror", lambda error: uncaught.append(str(error)))
    yield page
    context.close()
    assert not uncaught, f"uncaught errors in the page: {uncaught}"


def run_in_new_kernel(server: LabServer, path: str, code: str) -> None:
    """A session for ``path`` and ``code`` run in its kernel, as a notebook's cell would."""
    session = server.api(
        "POST", "api/sessions", {"path": path, "name": path, "type": "notebook", "kernel": {"name": "python3"}}
    )
    client = BlockingKernelClient()
    client.load_connection_file(str(server.root.parent / "runtime" / f"kernel-{session['kernel']['id']}.json"))
    client.hb_channel.time_to_dead = 10.0  # a busy machine can miss 1 s heartbeats
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        reply = client.execute_interactive(code, timeout=60, output_hook=lambda _msg: None)
        assert reply["content"]["status"] == "ok"
    finally:
        client.stop_channels()
    wait_until(
        lambda: server.api("GET", f"api/kernels/{session['kernel']['id']}")["execution_state"] == "idle",
        what=f"the kernel of {path} to be idle",
        timeout=30,
    )


def open_notebook(page: Page, server: LabServer) -> None:
    page.goto(f"{server.url}lab/tree/{NOTEBOOK}?reset&token={server.token}")
    page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first.wait_for(timeout=60_000)


def test_restore_offer_brings_the_variables_back_after_a_stop(
    page: Page, fake_gpu: FakeGpu, tmp_path_factory: pytest.TempPathFactory, artifacts: Path
) -> None:
    home = tmp_path_factory.mktemp("home")
    environment = {**BUDGET_ENV, **gpu_environment(fake_gpu), "HOME": str(home), "JUPYTERHUB_SERVER_NAME": ""}
    notebook = {"cells": [], "metadata": {"kernelspec": KERNELSPEC}, "nbformat": 4, "nbformat_minor": 5}

    with running_lab(tmp_path_factory.mktemp("before"), environment, artifacts / "lab-hibernate.log") as server:
        server.api("PUT", f"api/contents/{NOTEBOOK}", {"type": "notebook", "content": notebook})
        open_notebook(page, server)
        run_cell(page, "import numpy as np\nweights = np.arange(1_000_000.0)\nsame = weights\nnotes = {'epoch': 7}")
        page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first.wait_for(timeout=60_000)
        server.api("PUT", f"api/contents/{CLASSIC}", {"type": "notebook", "content": notebook})
        run_in_new_kernel(server, CLASSIC, "steps = [1, 2, 3]")
        report = server.api("POST", "fracnb/api/hibernate", {"timeout_seconds": 60})
        assert problems(HIBERNATION_REPORT, report) == []
        outcomes = {k["path"]: (k["status"], k["variables"]) for k in report["kernels"]}
        assert outcomes == {NOTEBOOK: ("saved", 4), CLASSIC: ("saved", 1)}
        page.close()  # the tab of the stopped server
    page = page.context.new_page()

    with running_lab(tmp_path_factory.mktemp("after"), environment, artifacts / "lab-restore.log") as server:
        for path in (NOTEBOOK, CLASSIC):
            (server.root / path).write_text(json.dumps(notebook))  # the notebooks, as the home keeps them
        states = server.api("GET", "fracnb/api/hibernation/states")
        assert problems(HIBERNATION_STATES, states) == []
        assert sorted(state["path"] for state in states["states"]) == [CLASSIC, NOTEBOOK]
        open_notebook(page, server)

        offer = page.locator(TOAST, has_text=re.compile(r"train\.ipynb: Restore variables from \d\d:\d\d \(7\.6 MiB\)"))
        expect(offer).to_be_visible(timeout=30_000)
        wait_for_animations(page)
        page.screenshot(path=artifacts / "lab-restore-offer.png")
        offer.get_by_role("button", name="Restore", exact=True).click()

        done = page.locator(TOAST, has_text="Restored 4 variables (7.6 MiB).")
        expect(done).to_be_visible(timeout=60_000)
        run_cell(page, "print(int(weights.sum()), same is weights, notes['epoch'])")
        expect(page.locator(".jp-Notebook .jp-Cell").last.locator(".jp-OutputArea-output")).to_have_text(
            "499999500000 True 7", timeout=30_000
        )
        # Restored once: the panel still lists it (to discard), and no new offer comes.
        states = {s["path"]: s for s in server.api("GET", "fracnb/api/hibernation/states")["states"]}
        assert states[NOTEBOOK]["restored_at"] is not None
        page.locator(".fracnb-meter-status").click()
        saved = page.locator(".fracnb-meter-saved .fracnb-meter-state", has_text=NOTEBOOK)
        expect(saved).to_contain_text("restored once")
        wait_for_animations(page)
        page.screenshot(path=artifacts / "lab-restore-panel.png")
        saved.get_by_role("button", name="Discard").click()
        expect(saved).to_have_count(0, timeout=30_000)
        assert [s["path"] for s in server.api("GET", "fracnb/api/hibernation/states")["states"]] == [CLASSIC]

        # Notebook 7 makes the same offer.
        page.goto(f"{server.url}notebooks/{CLASSIC}?token={server.token}")
        offer = page.locator(TOAST, has_text=re.compile(r"classic\.ipynb: Restore variables from \d\d:\d\d"))
        expect(offer).to_be_visible(timeout=60_000)
        offer.get_by_role("button", name="Restore", exact=True).click()
        expect(page.locator(TOAST, has_text="Restored 1 variable")).to_be_visible(timeout=60_000)
        wait_for_animations(page)
        page.screenshot(path=artifacts / "notebook7-restored.png")
