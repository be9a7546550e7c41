"""Shared pytest configuration for the whole suite.

Fixtures from ``fracnb_testbed.pytest_plugin`` (area fixtures live in ``tests/<area>/conftest.py``):

- ``testbed`` (session): a running ``mixed`` cluster; ``.kubeconfig``, ``.server``,
  ``.api_client()`` (kubernetes_asyncio), ``await .wait_for_pod(ns, name, predicate, timeout)``,
  ``.create_namespace()``, ``.list_nodes()``, ``.events_for()``, ``.set_runner_env()``,
  ``.local_processes()``, ``.pod_log()``. Tests using it are marked ``k8s`` automatically.
- ``k8s_namespace``: a fresh namespace with a ``default`` ServiceAccount, cleaned up after the test.

Here:

- ``offline_kubeconfig``: a kubeconfig naming a cluster nobody listens at, read by KubeSpawner and
  kubernetes_asyncio for the test (:func:`fracnb_spawner.cluster.kube.offline_kubeconfig`), so
  spawners can be built without a cluster; every offline spawner test uses it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fracnb_spawner.cluster import kube

pytest_plugins = ["fracnb_testbed.pytest_plugin"]


@pytest.fixture
def offline_kubeconfig() -> Iterator[Path]:
    with kube.offline_kubeconfig() as path:
        yield path
