"""Fixtures for the end-to-end browser tests (marker ``browser``).

- ``demo``: the demo stack of ``fracnb_testbed.demo`` (real JupyterHub, configurable-http-proxy,
  FractionalSpawner, the fracnb service) on the session ``testbed``, with the simulated GPU
  passed to local pods through the runner env. Yields a ``RunningDemo``.
- ``browser``: headless Debian Chromium driven by Playwright, for the session.
- ``page``: a fresh browser context and page per test; its last screen is saved to
  ``test-artifacts/<test name>-final.png``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from fracnb_meter.testing.chromium import CHROMIUM, CHROMIUM_ARGS
from fracnb_testbed.demo import RunningDemo
from fracnb_testbed.handle import Testbed

from .stack import demo_with_fake_gpu

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def demo(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDemo]:
    with demo_with_fake_gpu(testbed, tmp_path_factory.mktemp("demo")) as running:
        yield running


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium", pytrace=False)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A page of its own; in the time zone a test module names in ``BROWSER_ZONE``, if it names one."""
    zone = getattr(request.module, "BROWSER_ZONE", None)
    context = browser.new_context(viewport={"width": 1300, "height": 850}, timezone_id=zone)
    opened = context.new_page()
    try:
        yield opened
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        opened.screenshot(path=str(ARTIFACTS / f"{request.node.name}-final.png"))
        context.close()
