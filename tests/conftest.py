"""Shared pytest configuration for the whole suite.

Fixtures from ``fracnb_testbed.pytest_plugin`` (area fixtures live in ``tests/<area>/conftest.py``):

- ``testbed`` (session): a running ``mixed`` cluster; ``.kubeconfig``, ``.server``,
  ``.api_client()`` (kubernetes_asyncio), ``await .wait_for_pod(ns, name, predicate, timeout)``,
  ``.create_namespace()``, ``.list_nodes()``, ``.events_for()``, ``.set_runner_env()``,
  ``.local_processes()``, ``.pod_log()``. Tests using it are marked ``k8s`` automatically.
- ``k8s_namespace``: a fresh namespace with a ``default`` ServiceAccount, cleaned up after the test.

Here:

- ``pytest_sessionfinish``: what is left for the garbage collector at the end of the run is collected here
  and named, not failed: an SSL connection whose event loop a test's end closed while it shut down (more
  often on a loaded machine) would otherwise fail a green run in pytest's own last collection, with no test
  to blame. A resource a test leaves during the run still fails the test it is collected in.
- ``offline_kubeconfig``: a kubeconfig naming a cluster nobody listens at, read by KubeSpawner and
  kubernetes_asyncio for the test (:func:`fracnb_spawner.cluster.kube.offline_kubeconfig`), so
  spawners can be built without a cluster; every offline spawner test uses it.
"""

from __future__ import annotations

import gc
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from fracnb_spawner.cluster import kube

pytest_plugins = ["fracnb_testbed.pytest_plugin"]


@pytest.fixture
def offline_kubeconfig() -> Iterator[Path]:
    with kube.offline_kubeconfig() as path:
        yield path


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    with warnings.catch_warnings(record=True) as left:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
        gc.collect()
    for warning in left:
        sys.stderr.write(f"left for the garbage collector at the end of the run: {warning.message}\n")
