"""A researcher's variables across a stop, in a real JupyterLab driven by headless Chromium.

The user computes in a notebook; the server is asked to hibernate (as the hub's service does
before an idle stop) and is stopped. A new server starts on the same home folder; when the
notebook opens in its new kernel, JupyterLab offers "Restore variables from 14:05 EST (...)", in
the browser's zone (here New York's), and a click brings the variables back into that kernel.
Discarding asks first, everywhere; an offer goes as soon as its state is restored from anywhere.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from jupyter_client.blocking import BlockingKernelClient
from playwright.sync_api import Browser, Page, expect

from fracnb_schemas import HIBERNATION_REPORT, HIBERNATION_STATES, problems
from fracnb_testbed.procs import wait_until
from tests.browser.meter_lab import BUDGET_ENV, FakeGpu, LabServer, gpu_environment, running_lab, wait_for_animations
from tests.e2e.pages import run_cell

pytestmark = pytest.mark.browser

NOTEBOOK = "train.ipynb"
CLASSIC = "classic.ipynb"  # opened in Notebook 7
TOAST = ".Toastify__toast"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
BROWSER_ZONE = "America/New_York"  # the user's, not the server's (UTC)


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 850}, timezone_id=BROWSER_ZONE)
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


def saved_at_in_browser_zone(server: LabServer, path: str) -> str:
    """ "19:37 EST": when ``path``'s state was saved, as the user's browser reads the clock."""
    (state,) = [s for s in server.api("GET", "fracnb/api/hibernation/states")["states"] if s["path"] == path]
    local = datetime.fromisoformat(state["saved_at"]).astimezone(ZoneInfo(BROWSER_ZONE))
    return f"{local:%H:%M} {local.tzname()}"


def open_notebook(page: Page, server: LabServer) -> None:
    page.goto(f"{server.url}lab/tree/{NOTEBOOK}?reset&token={server.token}")
    page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first.wait_for(timeout=60_000)


def answer_as_a_stopped_server(page: Page) -> None:
    """From now on the page's meter and hibernation requests get JupyterHub's 424 for a server that stopped."""
    page.route(
        re.compile(r"/fracnb/api/(usage|hibernation)"),
        lambda route: route.fulfill(
            status=424,
            content_type="application/json",
            body=json.dumps({"status": 424, "message": "ann's server is not running"}),
        ),
    )


def test_restore_offer_brings_the_variables_back_after_a_stop(
    page: Page, fake_gpu: FakeGpu, tmp_path_factory: pytest.TempPathFactory, artifacts: Path
) -> None:
    home = tmp_path_factory.mktemp("home")
    environment = {**BUDGET_ENV, **gpu_environment(fake_gpu), "HOME": str(home), "JUPYTERHUB_SERVER_NAME": ""}
    notebook = {"cells": [], "metadata": {"kernelspec": KERNELSPEC}, "nbformat": 4, "nbformat_minor": 5}

    with running_lab(tmp_path_factory.mktemp("before"), environment, artifacts / "lab-hibernate.log") as server:
        notebooks = server.root
        server.api("PUT", f"api/contents/{NOTEBOOK}", {"type": "notebook", "content": notebook})
        open_notebook(page, server)
        run_cell(page, "import numpy as np\nweights = np.arange(1_000_000.0)\nsame = weights\nnotes = {'epoch': 7}")
        page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first.wait_for(timeout=60_000)
        server.api("PUT", f"api/contents/{CLASSIC}", {"type": "notebook", "content": notebook})
        run_in_new_kernel(server, CLASSIC, "steps = [1, 2, 3]")
        report = server.api("POST", "fracnb/api/hibernate", {"timeout_seconds": 60})
        assert problems(HIBERNATION_REPORT, report) == []
        outcomes = {k["path"]: (k["status"], k["variables"]) for k in report["kernels"]}
        assert outcomes == {NOTEBOOK: ("saved", 3), CLASSIC: ("saved", 1)}  # np is no variable of the user's
        page.close()  # the tab of the stopped server
    page = page.context.new_page()

    # The new server finds the notebooks where the home keeps them.
    after = tmp_path_factory.mktemp("after")
    with running_lab(after, environment, artifacts / "lab-restore.log", root=notebooks) as server:
        states = server.api("GET", "fracnb/api/hibernation/states")
        assert problems(HIBERNATION_STATES, states) == []
        assert sorted(state["path"] for state in states["states"]) == [CLASSIC, NOTEBOOK]
        open_notebook(page, server)
        # The page told the server its browser's zone, for the kernel's own times.
        wait_until(
            lambda: server.api("GET", "fracnb/api/display-zone")["time_zone"] == BROWSER_ZONE,
            what="the page to tell the server its time zone",
            timeout=30,
        )

        saved_at = saved_at_in_browser_zone(server, NOTEBOOK)
        offer = page.locator(TOAST, has_text=f"train.ipynb: Restore variables from {saved_at} (7.6 MiB)")
        expect(offer).to_be_visible(timeout=30_000)
        wait_for_animations(page)
        page.screenshot(path=artifacts / "lab-restore-offer.png")
        offer.get_by_role("button", name="Restore", exact=True).click()

        done = page.locator(TOAST, has_text="Restored 3 variables (7.6 MiB).")
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
        expect(saved).to_contain_text(f"Restore variables from {saved_at} (7.6 MiB)")
        # One unit style: an idle server's total reads as its kernels do ("0 B"), not "0 GiB" beside "0 B".
        panel = page.locator("#fracnb-meter-panel")
        expect(panel.locator(".fracnb-meter-total-text")).to_contain_text("0 B of 20 GiB budget")
        expect(panel.locator(".fracnb-meter-kernel-memory").first).to_have_text("0 B")
        expect(panel).not_to_contain_text(re.compile(r"\b0 GiB"))
        expect(page.locator(".fracnb-meter-sampled")).to_have_text(re.compile(r"^Sampled \d\d:\d\d:\d\d E[SD]T$"))
        saved.scroll_into_view_if_needed()
        wait_for_animations(page)
        page.screenshot(path=artifacts / "lab-restore-panel.png")
        assert_not_squeezed(page, saved)

        # Discarding asks first; "Keep them" keeps them.
        saved.get_by_role("button", name="Discard").click()
        dialog = page.locator(".jp-Dialog")
        expect(dialog).to_contain_text(
            f"Delete the 3 variables of {NOTEBOOK} saved at {saved_at} (7.6 MiB)? They cannot be restored afterwards."
        )
        wait_for_animations(page)
        page.screenshot(path=artifacts / "lab-discard-question.png")
        dialog.get_by_role("button", name="Keep them").click()
        expect(dialog).to_have_count(0)
        assert NOTEBOOK in [s["path"] for s in server.api("GET", "fracnb/api/hibernation/states")["states"]]
        saved.get_by_role("button", name="Discard").click()
        dialog.get_by_role("button", name="Discard").click()
        expect(saved).to_have_count(0, timeout=30_000)
        assert [s["path"] for s in server.api("GET", "fracnb/api/hibernation/states")["states"]] == [CLASSIC]

        # Notebook 7 makes the same offer; its Discard asks first too, and keeps the offer when kept.
        page.goto(f"{server.url}notebooks/{CLASSIC}?token={server.token}")
        classic_at = saved_at_in_browser_zone(server, CLASSIC)
        offer = page.locator(TOAST, has_text=f"classic.ipynb: Restore variables from {classic_at} (")
        expect(offer).to_be_visible(timeout=60_000)
        offer.get_by_role("button", name="Discard", exact=True).click()
        dialog.get_by_role("button", name="Keep them").click()
        expect(dialog).to_have_count(0)
        expect(offer).to_be_visible()
        # Restored from the notebook itself, by the magic: the offer goes without a click on it.
        run_cell(page, "%load_ext fracnb_meter.hibernation\n%fracnb_restore")
        expect(page.locator(".jp-Notebook .jp-Cell").last.locator(".jp-OutputArea-output")).to_contain_text(
            "Restored 1 variable", timeout=60_000
        )
        expect(offer).to_have_count(0, timeout=30_000)
        run_cell(page, "print(steps)")
        expect(page.locator(".jp-Notebook .jp-Cell").last.locator(".jp-OutputArea-output")).to_have_text(
            "[1, 2, 3]", timeout=30_000
        )
        wait_for_animations(page)
        page.screenshot(path=artifacts / "notebook7-restored.png")


def close_sessions(server: LabServer, path: str) -> None:
    for session in server.api("GET", "api/sessions"):
        if session["path"] == path:
            server.api("DELETE", f"api/sessions/{session['id']}")


def test_a_restore_asks_before_replacing_newer_values_and_withdraws_replaced_offers(
    page: Page, fake_gpu: FakeGpu, tmp_path_factory: pytest.TempPathFactory, artifacts: Path
) -> None:
    """After a restart the user sets ``lr`` again before clicking Restore: the saved ``lr`` does not
    silently replace it. An offer whose state was saved again since restores nothing and gives way
    to the newer one."""
    home = tmp_path_factory.mktemp("home")
    environment = {**BUDGET_ENV, **gpu_environment(fake_gpu), "HOME": str(home), "JUPYTERHUB_SERVER_NAME": ""}
    notebook = {"cells": [], "metadata": {"kernelspec": KERNELSPEC}, "nbformat": 4, "nbformat_minor": 5}
    offers = page.locator(TOAST, has_text=re.compile(r"train\.ipynb: Restore variables from"))
    last_output = page.locator(".jp-Notebook .jp-Cell").last.locator(".jp-OutputArea-output")

    with running_lab(tmp_path_factory.mktemp("lab"), environment, artifacts / "lab-conflict.log") as server:
        server.api("PUT", f"api/contents/{NOTEBOOK}", {"type": "notebook", "content": notebook})
        run_in_new_kernel(server, NOTEBOOK, "lr = 0.1\nseed = 7")
        assert outcome_of(server.api("POST", "fracnb/api/hibernate", {"timeout_seconds": 60})) == "saved"
        close_sessions(server, NOTEBOOK)  # the stop: the next kernel of the notebook is a new one
        open_notebook(page, server)
        expect(offers).to_have_count(1, timeout=30_000)
        run_cell(page, "lr = 0.5")
        expect(last_output).to_have_count(0)
        offers.get_by_role("button", name="Restore", exact=True).click()

        question = page.locator(
            TOAST,
            has_text="train.ipynb: Nothing was restored yet: lr (yours 0.5, saved 0.1) differs. Keep yours, or take the saved ones?",
        )
        expect(question).to_be_visible(timeout=60_000)
        wait_for_animations(page)
        page.screenshot(path=artifacts / "lab-restore-conflict.png")
        question.get_by_role("button", name="Keep mine").click()
        expect(page.locator(TOAST, has_text="Kept your own values of lr.")).to_be_visible(timeout=60_000)
        run_cell(page, "print(lr, seed)")
        expect(last_output).to_have_text("0.5 7", timeout=30_000)

        # A newer save: offered once the page hears of it (here, a session change) ...
        run_cell(page, "lr = 0.9")
        page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first.wait_for(timeout=60_000)
        assert outcome_of(server.api("POST", "fracnb/api/hibernate", {"timeout_seconds": 60})) == "saved"
        run_in_new_kernel(server, "other.ipynb", "x = 1")
        expect(offers).to_have_count(1, timeout=30_000)
        # ... and saved again before the click: the offer restores nothing and gives way to the newest.
        assert outcome_of(server.api("POST", "fracnb/api/hibernate", {"timeout_seconds": 60})) == "saved"
        offers.get_by_role("button", name="Restore", exact=True).click()
        expect(page.locator(TOAST, has_text="train.ipynb was saved again since this offer")).to_be_visible(
            timeout=60_000
        )
        expect(offers).to_have_count(1, timeout=30_000)
        state = [s for s in server.api("GET", "fracnb/api/hibernation/states")["states"] if s["path"] == NOTEBOOK]
        assert state[0]["restored_at"] is None
        wait_for_animations(page)
        page.screenshot(path=artifacts / "lab-restore-newer-offer.png")


def outcome_of(report: dict) -> str:
    assert problems(HIBERNATION_REPORT, report) == []
    (entry,) = [kernel for kernel in report["kernels"] if kernel["path"] == NOTEBOOK]
    return entry["status"]


def assert_not_squeezed(page: Page, row: object) -> None:
    """The saved state's row uses the panel's width: the file name on one line, the buttons inside it."""
    panel = page.locator("#fracnb-meter-panel").bounding_box()
    name = row.locator(".fracnb-meter-state-path").bounding_box()
    line_height = float(
        row.locator(".fracnb-meter-state-path").evaluate("e => parseFloat(getComputedStyle(e).lineHeight) || 16")
    )
    assert name["width"] >= 0.75 * panel["width"], (name, panel)
    assert name["height"] < 1.5 * line_height, f"the file name wraps: {name}"
    for label in ("Restore", "Discard"):
        button = row.get_by_role("button", name=label).bounding_box()
        assert button["x"] + button["width"] <= panel["x"] + panel["width"] - 8, (label, button, panel)


def test_a_damaged_state_names_what_it_lost_and_enter_keeps_it(
    page: Page, fake_gpu: FakeGpu, tmp_path_factory: pytest.TempPathFactory, artifacts: Path
) -> None:
    """A saved ``arrays.bin`` cut short (``truncate -s 1000``) loses the array whose bytes it held: the
    offer, the panel and the restore's notification name it (within the 140 characters Lab shows), the
    restore counts only what it restored, and Details says why. Enter in the Discard question keeps the
    saved work."""
    home = tmp_path_factory.mktemp("home")
    environment = {**BUDGET_ENV, **gpu_environment(fake_gpu), "HOME": str(home), "JUPYTERHUB_SERVER_NAME": ""}
    notebook = {"cells": [], "metadata": {"kernelspec": KERNELSPEC}, "nbformat": 4, "nbformat_minor": 5}
    code = "lr = 0.1\nepochs = 7\nnotes = {'run': 'baseline'}\nweights = __import__('numpy').arange(1_000_000.0)"
    with running_lab(tmp_path_factory.mktemp("lab"), environment, artifacts / "lab-damaged.log") as server:
        server.api("PUT", f"api/contents/{NOTEBOOK}", {"type": "notebook", "content": notebook})
        run_in_new_kernel(server, NOTEBOOK, code)
        assert outcome_of(server.api("POST", "fracnb/api/hibernate", {"timeout_seconds": 60})) == "saved"
        close_sessions(server, NOTEBOOK)
        (arrays,) = home.rglob("arrays.bin")
        with arrays.open("r+b") as damaged:
            damaged.truncate(1000)

        open_notebook(page, server)
        offer = page.locator(
            TOAST, has_text=re.compile(r"train\.ipynb: Restore variables from .*Lost \(damaged\): weights\.")
        )
        expect(offer).to_be_visible(timeout=30_000)
        expect(offer).not_to_contain_text("MiB")  # the 7.6 MiB of weights cannot come back
        page.locator(".fracnb-meter-status").click()
        saved = page.locator(".fracnb-meter-saved .fracnb-meter-state", has_text=NOTEBOOK)
        expect(saved).to_contain_text("3 variables")
        expect(saved).to_contain_text(
            "lost, the saved state is damaged: weights (arrays.bin is cut short (1000 bytes))"
        )

        # Enter in the Discard question keeps the saved work; deleting it takes a click.
        offer.get_by_role("button", name="Discard", exact=True).click()
        dialog = page.locator(".jp-Dialog")
        expect(dialog.get_by_role("button", name="Keep them")).to_be_focused()
        page.keyboard.press("Enter")
        expect(dialog).to_have_count(0)
        assert [s["path"] for s in server.api("GET", "fracnb/api/hibernation/states")["states"]] == [NOTEBOOK]

        offer.get_by_role("button", name="Restore", exact=True).click()
        done = page.locator(
            TOAST, has_text=re.compile(r"Restored 3 of 4 variables \(\d+ B\)\. Not restored: weights\.")
        )
        expect(done).to_be_visible(timeout=60_000)
        wait_for_animations(page)
        page.screenshot(path=artifacts / "lab-restore-damaged.png")
        done.get_by_role("button", name="Details").click()
        expect(dialog).to_contain_text("The saved state is damaged: arrays.bin is cut short (1000 bytes)")
        expect(dialog).to_contain_text("Not restored: weights (the saved state is damaged")
        dialog.get_by_role("button", name="Ok").click()
        # The notification centre keeps the same line, not one cut at 140 characters.
        page.locator(".jp-Notification-Status").click()
        expect(page.locator(".jp-Notification-Center")).to_contain_text("Not restored: weights.")

        # The server stops (JupyterHub answers 424 for it from now on): the panel no longer lists its
        # states with Restore and Discard buttons for a server that is gone.
        answer_as_a_stopped_server(page)
        expect(page.locator(".fracnb-meter-status")).to_have_text("Server stopped", timeout=30_000)
        expect(page.locator(".fracnb-meter-saved")).to_have_count(0)
        expect(page.locator("#fracnb-meter-panel").get_by_role("button", name="Restore")).to_have_count(0)


def test_the_stop_toast_of_a_notebook_that_was_running_a_cell_says_its_variables_were_not_saved(
    page: Page, fake_gpu: FakeGpu, tmp_path_factory: pytest.TempPathFactory, artifacts: Path
) -> None:
    """The user stops the server while this tab's notebook runs a cell: the other notebook's variables
    are saved, this one's are not, and this tab's toast says so rather than "Your variables were saved"."""
    home = tmp_path_factory.mktemp("home")
    environment = {**BUDGET_ENV, **gpu_environment(fake_gpu), "HOME": str(home), "JUPYTERHUB_SERVER_NAME": ""}
    notebook = {"cells": [], "metadata": {"kernelspec": KERNELSPEC}, "nbformat": 4, "nbformat_minor": 5}
    with running_lab(tmp_path_factory.mktemp("lab"), environment, artifacts / "lab-busy-stop.log") as server:
        server.api("PUT", f"api/contents/{NOTEBOOK}", {"type": "notebook", "content": notebook})
        server.api("PUT", f"api/contents/{CLASSIC}", {"type": "notebook", "content": notebook})
        run_in_new_kernel(server, CLASSIC, "steps = [1, 2, 3]")
        open_notebook(page, server)
        run_cell(page, "import time\nlr = 0.1\ntime.sleep(600)")
        page.locator('.jp-Notebook-ExecutionIndicator[data-status="busy"]').first.wait_for(timeout=60_000)
        report = server.api("POST", "fracnb/api/hibernate?stop=user", {"timeout_seconds": 60})
        assert {k["path"]: k["status"] for k in report["kernels"]} == {NOTEBOOK: "busy", CLASSIC: "saved"}

        answer_as_a_stopped_server(page)
        stopped = page.locator(TOAST, has_text="This server was stopped")
        expect(stopped).to_contain_text("train.ipynb was running a cell: its variables were not saved.", timeout=30_000)
        expect(stopped).not_to_contain_text("Your variables were saved")
        wait_for_animations(page)
        page.screenshot(path=artifacts / "lab-busy-stop.png")


def test_an_offer_for_a_notebook_that_is_not_open_opens_it(
    page: Page, fake_gpu: FakeGpu, tmp_path_factory: pytest.TempPathFactory, artifacts: Path
) -> None:
    """After a restart a notebook's new kernel runs while its tab is not open in this page: the offer
    that names it has an Open button, which opens it."""
    home = tmp_path_factory.mktemp("home")
    environment = {**BUDGET_ENV, **gpu_environment(fake_gpu), "HOME": str(home), "JUPYTERHUB_SERVER_NAME": ""}
    notebook = {"cells": [], "metadata": {"kernelspec": KERNELSPEC}, "nbformat": 4, "nbformat_minor": 5}
    with running_lab(tmp_path_factory.mktemp("lab"), environment, artifacts / "lab-offer-open.log") as server:
        for path in (NOTEBOOK, CLASSIC):
            server.api("PUT", f"api/contents/{path}", {"type": "notebook", "content": notebook})
        run_in_new_kernel(server, CLASSIC, "steps = [1, 2, 3]")
        report = server.api("POST", "fracnb/api/hibernate", {"timeout_seconds": 60})
        assert {k["path"]: k["status"] for k in report["kernels"]} == {CLASSIC: "saved"}
        close_sessions(server, CLASSIC)
        run_in_new_kernel(server, CLASSIC, "started = True")  # its new kernel, with no tab here

        open_notebook(page, server)
        offer = page.locator(TOAST, has_text=re.compile(r"classic\.ipynb: Restore variables from"))
        expect(offer).to_be_visible(timeout=30_000)
        offer.get_by_role("button", name="Open", exact=True).click()
        expect(page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text=CLASSIC)).to_be_visible(timeout=30_000)
        expect(offer).to_be_visible()  # still there, to restore into the notebook now open
        expect(offer.get_by_role("button", name="Open", exact=True)).to_be_visible()
        wait_for_animations(page)
        page.screenshot(path=artifacts / "lab-offer-opened.png")
        page.close()  # before the server goes: a page left open reads a server that is gone
