"""Page helpers shared by the end-to-end tests."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from fracnb_testbed.demo import RunningDemo

from .conftest import ARTIFACTS

SPAWN_TIMEOUT_MS = 180_000


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def log_in(page: Page, demo: RunningDemo, user: str) -> None:
    page.goto(f"{demo.settings.url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", demo.settings.password)
    page.click("#login_submit")
    page.wait_for_url(re.compile(r".*/(hub/(home|spawn)|user/).*"))


def profile_row(page: Page, slug: str):
    return page.locator(f'[data-fracnb-profile="{slug}"]')


def start_profile(page: Page, demo: RunningDemo, user: str, slug: str) -> None:
    """Start ``user``'s server with ``slug`` from the form (no-op if it already runs) and wait for Lab."""
    page.goto(f"{demo.settings.url}/hub/spawn")
    if f"/user/{user}/" not in page.url:
        page.check(f'input[name=profile][value="{slug}"]')
        page.click("form [type=submit]")
    page.wait_for_url(re.compile(rf".*/user/{user}/lab.*"), timeout=SPAWN_TIMEOUT_MS)
    page.wait_for_selector(".jp-LabShell", timeout=60_000)


def run_cell(page: Page, code: str) -> None:
    """Type ``code`` into a fresh cell at the end of the open notebook and run it.

    An execute request sent while the kernel is still connecting can be dropped, leaving the
    cell unexecuted ("[ ]:"); the run is repeated until the prompt shows it was taken.
    """
    page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first.wait_for(timeout=60_000)
    cell = page.locator(".jp-Notebook .jp-Cell").last
    if cell.locator(".cm-content").inner_text().strip():
        cell.click()
        page.keyboard.press("Escape")
        page.keyboard.press("b")  # a new cell below
        cell = page.locator(".jp-Notebook .jp-Cell").last
    editor = cell.locator(".cm-content")
    editor.click()
    editor.type(code)
    prompt = cell.locator(".jp-InputPrompt")
    for _attempt in range(4):
        editor.click()
        page.keyboard.press("Control+Enter")
        try:
            expect(prompt).not_to_have_text(re.compile(r"^\[ \]:$"), timeout=15_000)
            return
        except AssertionError:
            continue
    raise AssertionError(f"the notebook never ran the cell {code!r}")


def set_tab_hidden(page: Page, hidden: bool) -> None:
    """What switching to another browser tab and back does to the page (headless Chromium keeps
    every page visible): JupyterLab's polls stand by while hidden, as they would for a user away."""
    page.evaluate(
        """hidden => {
            Object.defineProperty(document, "visibilityState", {configurable: true, get: () => hidden ? "hidden" : "visible"});
            Object.defineProperty(document, "hidden", {configurable: true, get: () => hidden});
            document.dispatchEvent(new Event("visibilitychange"));
        }""",
        hidden,
    )
