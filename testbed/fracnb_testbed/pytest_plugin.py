"""pytest fixtures for the testbed: ``testbed`` (session) and ``k8s_namespace`` (per test); and for
the ``dra`` cluster (GPUs as DRA ResourceSlices, with kube-controller-manager), started only by
tests that ask for it: ``dra_testbed`` (session) and ``dra_namespace`` (per test).

Enable with ``pytest_plugins = ["fracnb_testbed.pytest_plugin"]``. Missing binaries make the
fixture fail, never skip: CI must not pass without the cluster tests.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from fracnb_testbed.binaries import find_bin_dir
from fracnb_testbed.clusters import load_cluster
from fracnb_testbed.controlplane import down, up
from fracnb_testbed.errors import TestbedError
from fracnb_testbed.handle import Testbed

TESTBED_CLUSTER = "mixed"
DRA_CLUSTER = "dra"


def _progress(message: str) -> None:
    sys.stderr.write(f"[testbed] {message}\n")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests using the cluster carry the ``k8s`` marker, so ``-m "not k8s"`` leaves them out."""
    for item in items:
        if {"testbed", "k8s_namespace", "dra_testbed", "dra_namespace"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.k8s)


@pytest.fixture(scope="session")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """The ``mixed`` cluster, started once per session and stopped at its end."""
    yield from running_cluster(TESTBED_CLUSTER, tmp_path_factory)


@pytest.fixture(scope="session")
def dra_testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """The ``dra`` cluster, started once per session by the first test that uses it."""
    yield from running_cluster(DRA_CLUSTER, tmp_path_factory)


@pytest.fixture
def dra_namespace(dra_testbed: Testbed) -> Iterator[str]:
    """A fresh namespace of the ``dra`` cluster for one test; its pods go afterwards."""
    name = dra_testbed.create_namespace()
    try:
        yield name
    finally:
        dra_testbed.delete_namespace(name)


def running_cluster(cluster: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """The body of a session fixture running the testbed cluster ``cluster`` (clusters/<cluster>.yaml): the test
    fails, never skips, if it cannot start; its logs stay in pytest's temporary directory."""
    try:
        bin_dir = find_bin_dir()
        state = up(load_cluster(cluster), tmp_path_factory.mktemp(cluster), bin_dir=bin_dir, progress=_progress)
    except TestbedError as error:
        pytest.fail(f"the testbed cluster could not start ({cluster}): {error}", pytrace=False)
    handle = Testbed(state)
    try:
        yield handle
    finally:
        # Logs stay in pytest's temporary directory for inspection.
        down(state.directory, keep_files=True)


@pytest.fixture
def k8s_namespace(testbed: Testbed) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount) for one test; its pods go afterwards."""
    name = testbed.create_namespace()
    try:
        yield name
    finally:
        testbed.delete_namespace(name)
