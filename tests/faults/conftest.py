"""Fixtures of the fault tests (marker ``faults``), in a pytest process of their own (``./dev test``).

- ``faults_testbed`` (session): the ``faults`` cluster (testbed/fracnb_testbed/clusters/faults.yaml),
  started once for these tests alone, since they stop its apiserver and delete its nodes.
- ``browser``: headless Debian Chromium through Playwright, for the session.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from fracnb_meter.testing.chromium import CHROMIUM, CHROMIUM_ARGS
from fracnb_testbed.binaries import find_bin_dir
from fracnb_testbed.clusters import load_cluster
from fracnb_testbed.controlplane import down, up
from fracnb_testbed.errors import TestbedError
from fracnb_testbed.handle import Testbed


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.faults)
            item.add_marker(pytest.mark.k8s)


@pytest.fixture(scope="session")
def faults_testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    try:
        state = up(
            load_cluster("faults"),
            tmp_path_factory.mktemp("faults"),
            bin_dir=find_bin_dir(),
            progress=lambda m: sys.stderr.write(f"[testbed] {m}\n"),
        )
    except TestbedError as error:
        pytest.fail(f"the testbed cluster could not start: {error}", pytrace=False)
    try:
        yield Testbed(state)
    finally:
        down(state.directory, keep_files=True)


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
