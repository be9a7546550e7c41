"""Shared pytest configuration for the whole suite.

Fixtures from ``fracnb_testbed.pytest_plugin`` (area fixtures live in ``tests/<area>/conftest.py``):

- ``testbed`` (session): a running ``mixed`` cluster; ``.kubeconfig``, ``.server``,
  ``.api_client()`` (kubernetes_asyncio), ``await .wait_for_pod(ns, name, predicate, timeout)``,
  ``.create_namespace()``, ``.list_nodes()``, ``.events_for()``, ``.set_runner_env()``,
  ``.local_processes()``, ``.pod_log()``. Tests using it are marked ``k8s`` automatically.
- ``k8s_namespace``: a fresh namespace with a ``default`` ServiceAccount, cleaned up after the test.
"""

pytest_plugins = ["fracnb_testbed.pytest_plugin"]
