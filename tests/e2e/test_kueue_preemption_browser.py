"""A notebook Kueue preempts, with its JupyterLab tab open, in Chromium on the real Kueue.

Kueue deletes the pod: the notebook saves its idle kernels' variables in its grace period and tells the fracnb
service, whose notice of the stop the hub home shows. Until the hub's next poll the proxy still routes to the pod
and answers 503, which brought back JupyterLab's stock "Server unavailable or unreachable ... restart it?" dialog
(whose Restart would queue again in silence). The open tab says the service's notice instead, in the same words
as the hub's pages: why (preempted, by whom), what was saved of which notebook, and that starting again waits in
Kueue's queue; the stock dialog never shows. Before that, a server on quota another team lent says so.

Here, not in tests/kueue: Playwright's sync API leaves an event loop marked running, which would break the
asyncio tests of the kueue stage that follow (tools/testlanes.py); this stage runs the browser tests.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
from playwright.sync_api import Page, expect

from fracnb_spawner.history.reading import HistoryReader
from fracnb_testbed.demo import RunningDemo
from fracnb_testbed.handle import Testbed
from fracnb_testbed.procs import wait_until
from tests.e2e.pages import log_in, run_cell, shot
from tests.e2e.stack import answer_of, request
from tests.kueue.conftest import kueue_testbed  # noqa: F401 -- the Kueue cluster, in this stage's own process
from tests.kueue.objects import ensure_priority_class, gpu_pod
from tests.kueue.test_demo_on_kueue import (  # noqa: F401 -- kueue_demo: the module's demo on Kueue
    TOKEN,
    fracnb_page,
    gone,
    kueue_demo,
    pod_of,
    server,
    start,
    user_token,
    wait_ready,
    words,
)

pytestmark = [pytest.mark.browser, pytest.mark.kueue, pytest.mark.k8s]

NOTEBOOK = "preempted.ipynb"
TOAST = ".Toastify__toast"
STOCK_DIALOG = ".jp-Dialog"


@pytest.fixture
def urgent_job(kueue_demo: RunningDemo, kueue_testbed: Testbed) -> Iterator[str]:  # noqa: F811
    """The name of a higher-priority GPU pod for admin's LocalQueue, deleted at the end."""
    ensure_priority_class(kueue_testbed, "urgent-batch", 5000)
    yield "urgent-for-admin-tab"
    kueue_testbed.delete_pod(kueue_demo.settings.namespace, "urgent-for-admin-tab", grace_seconds=0)


def write_notebook(demo: RunningDemo) -> None:
    notebook = {"cells": [], "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)",
                "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}  # fmt: skip
    status, answer = request(demo, f"user/admin/api/contents/{NOTEBOOK}", TOKEN, method="PUT",
                             body={"type": "notebook", "content": notebook})  # fmt: skip
    assert status in (200, 201), answer


def test_the_open_tab_of_a_preempted_notebook_says_the_hubs_notice_and_no_restart_dialog(
    kueue_demo: RunningDemo,  # noqa: F811
    kueue_testbed: Testbed,  # noqa: F811
    page: Page,
    urgent_job: str,
) -> None:
    demo, testbed, ns = kueue_demo, kueue_testbed, kueue_demo.settings.namespace
    start(demo, "admin")  # in no team: the demo's ClusterQueue of its own holds one quarter
    wait_ready(demo, "admin")
    write_notebook(demo)
    log_in(page, demo, "admin")
    page.goto(f"{demo.settings.url}/user/admin/lab/tree/{NOTEBOOK}")
    idle = page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first
    idle.wait_for(timeout=90_000)
    run_cell(page, "epoch = 41\nweights = [0.5] * 1000")
    idle.wait_for(timeout=60_000)
    status = page.locator(".fracnb-meter-status")
    expect(status).to_contain_text("GPU", timeout=60_000)  # the meter has read this server
    notebook_pod = pod_of(testbed, ns, "admin")

    testbed.create_pod(ns, gpu_pod(urgent_job, "fracnb-admin", priority_class="urgent-batch"))
    wait_until(lambda: gone(testbed, ns, notebook_pod), what="Kueue to preempt admin's notebook", timeout=180)

    # The tab says why and what was saved, from the notebook's last seconds on.
    toast = page.locator(TOAST, has_text="preempted by")
    expect(toast).to_contain_text(re.compile(r"Your server stopped at \d\d:\d\d \w+, preempted by a higher-priority "
                                             r"job of [\w-]+; 2 variables of preempted\.ipynb saved\."), timeout=60_000)  # fmt: skip
    # Its button to the hub home does not restart in silence: starting again is a new wait in Kueue's queue.
    expect(toast.get_by_role("button", name="Start again (waits in Kueue's queue)")).to_be_visible()
    expect(status).to_have_text("Server stopped")
    # Once the hub's poll has seen the stop (the proxy route goes, the hub answers 424), still fracnb's notice.
    wait_until(lambda: server(demo, "admin") is None, what="the hub to see admin's server stopped", timeout=90)
    history = f"sqlite:///{demo.settings.state_dir / 'fracnb-service.sqlite'}"
    notice = wait_until(lambda: HistoryReader().newest_stop(history, "admin", datetime.now(timezone.utc)),
                        what="the stop's notice in the session history", timeout=30)  # fmt: skip
    status.click()
    panel = page.locator("#fracnb-meter-panel .fracnb-meter-stopped")
    expect(panel.locator(".fracnb-meter-stopped-headline")).to_have_text(notice.details["text"])  # the hub's words
    expect(panel.locator(".fracnb-meter-stopped-saved")).to_contain_text("Variables of preempted.ipynb saved at ")
    expect(panel.locator(".fracnb-meter-hub-link")).to_contain_text("it waits in Kueue's queue for a GPU")
    expect(toast).to_have_count(1)
    expect(page.locator(STOCK_DIALOG)).to_have_count(0)  # nobody dismissed it: it never showed
    shot(page, "kueue-preempted-tab")

    # The hub home says the same, from the same record.
    page.goto(f"{demo.settings.url}/hub/home")
    expect(page.locator(".announcement .fracnb-stopped")).to_contain_text("2 variables of preempted.ipynb saved.")


def test_a_server_on_quota_another_team_lent_says_so_and_its_preemption_names_the_lender(
    kueue_demo: RunningDemo,  # noqa: F811
) -> None:
    """team-a's quarter is ann's; bob's quarter borrows team-b's idle one (cohort university). His fracnb page,
    and api/me (which his panel shows), say so before it bites; carol's start takes it back."""
    demo = kueue_demo
    start(demo, "ann")
    wait_ready(demo, "ann")
    start(demo, "bob")
    wait_ready(demo, "bob")
    bob = user_token(demo, "bob")

    def borrowing_said() -> str | None:
        mine = words(fracnb_page(demo, bob), "mine")
        return mine if "Borrowing:" in mine else None

    said = wait_until(borrowing_said, what="bob's page to say that team-a borrows", timeout=30)
    assert (
        "Borrowing: team-a uses 0.25 GPU more than its own quota of 0.25 GPU, lent by other teams of cohort "
        "university. A GPU server of team-a (yours too) may run on that lent quota, so Kueue can preempt it when a "
        "lending team takes its quota back" in said
    )
    assert answer_of(demo, "services/fracnb/api/me", bob)["borrowing"].startswith("Borrowing: team-a uses 0.25 GPU")

    start(demo, "carol")  # team-b takes its quarter back: Kueue preempts one of team-a's
    preempted = wait_until(lambda: next((user for user in ("ann", "bob") if server(demo, user) is None), None),
                           what="Kueue to preempt a server of team-a for carol's", timeout=180)  # fmt: skip
    wait_ready(demo, "carol")
    history = f"sqlite:///{demo.settings.state_dir / 'fracnb-service.sqlite'}"
    notice = wait_until(lambda: HistoryReader().newest_stop(history, preempted, datetime.now(timezone.utc)),
                        what="the stop's notice in the session history", timeout=30)  # fmt: skip
    assert "preempted by team-b taking back its own quota" in notice.details["text"]
    assert "Borrowing:" not in words(fracnb_page(demo, user_token(demo, "carol")), "mine")
