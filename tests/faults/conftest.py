"""Fixtures of the fault tests (marker ``faults``), in a pytest process of their own (``./dev test``).

- ``faults_testbed`` (session): the ``faults`` cluster (testbed/fracnb_testbed/clusters/faults.yaml),
  started once for these tests alone, since they stop its apiserver and delete its nodes.
- ``browser``: headless Debian Chromium through Playwright, for the session (the end-to-end tests' fixture).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fracnb_testbed.binaries import find_bin_dir
from fracnb_testbed.clusters import load_cluster
from fracnb_testbed.controlplane import down, up
from fracnb_testbed.errors import TestbedError
from fracnb_testbed.handle import Testbed
from tests.e2e.conftest import browser  # noqa: F401 - the same session fixture


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
