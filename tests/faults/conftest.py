"""Fixtures of the fault tests (marker ``faults``), in a pytest process of their own (``./dev test``).

- ``faults_testbed`` (session): the ``faults`` cluster (testbed/fracnb_testbed/clusters/faults.yaml),
  started once for these tests alone, since they stop its apiserver and delete its nodes.
- ``browser``: headless Debian Chromium through Playwright, for the session (the end-to-end tests' fixture).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fracnb_testbed.handle import Testbed
from fracnb_testbed.pytest_plugin import running_cluster
from tests.e2e.conftest import browser  # noqa: F401 - the same session fixture


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.faults)
            item.add_marker(pytest.mark.k8s)


@pytest.fixture(scope="session")
def faults_testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    yield from running_cluster("faults", tmp_path_factory)
