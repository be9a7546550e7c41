"""Fixtures of the tests on the real Kueue (marker ``kueue``), in a pytest process of their own (``./dev test``).

- ``kueue_testbed`` (session): the ``kueue`` cluster (testbed/fracnb_testbed/clusters/kueue.yaml) with
  Kueue's manager, started once for these tests, since some stop the manager. Skipped, saying how to
  build it, when testbed/go/build-kueue.sh has not built Kueue (it is optional: a cold build costs
  about 13 minutes on two cores).
- ``kueue_namespace``: a fresh namespace of it for one test.
- ``kueue_spawner``: FractionalSpawners in that namespace, as ``cluster_spawner`` of tests/spawner_k8s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from fracnb_testbed import kueue
from fracnb_testbed.errors import TestbedError
from fracnb_testbed.handle import Testbed
from fracnb_testbed.pytest_plugin import running_cluster
from tests.spawner_k8s.conftest import PROFILES, _spawners_on


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.kueue)
            item.add_marker(pytest.mark.k8s)
            # As in tests/spawner_k8s: KubeSpawner's per-loop API client may be collected in a later test.
            item.add_marker(
                pytest.mark.filterwarnings("ignore:Exception ignored in:pytest.PytestUnraisableExceptionWarning")
            )


@pytest.fixture(scope="session")
def kueue_testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    try:
        kueue.find_kueue()
    except TestbedError as error:
        pytest.skip(str(error))
    yield from running_cluster("kueue", tmp_path_factory)


@pytest.fixture
def kueue_namespace(kueue_testbed: Testbed) -> Iterator[str]:
    name = kueue_testbed.create_namespace()
    try:
        yield name
    finally:
        kueue_testbed.delete_namespace(name)


@pytest.fixture
async def kueue_spawner(kueue_testbed: Testbed, kueue_namespace: str) -> AsyncIterator[Callable]:
    """FractionalSpawners (as tests/spawner_k8s builds them) on the ``kueue`` cluster's KWOK nodes."""
    async for factory in _spawners_on(kueue_testbed, kueue_namespace, {"type": "kwok"}, PROFILES):
        yield factory
