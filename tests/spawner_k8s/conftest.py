"""Fixtures for FractionalSpawner against the testbed: ``cluster_spawner`` builds spawners
whose KubeSpawner client talks to the real kube-apiserver in a fresh namespace."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from traitlets.config import Config

from bench.reclaim import batch_priority
from tests.spawner_k8s.dra import A100

PROFILES = [
    {"display_name": "CPU", "slug": "cpu", "default": True},
    {"display_name": "Quarter", "slug": "quarter", "gpu": {"fraction": 0.25}},
    {"display_name": "Eighth", "slug": "eighth", "gpu": {"fraction": "1/8"}},
    {"display_name": "MPS quarter", "slug": "mps", "gpu": {"fraction": 0.25, "backend": "mps"}},
    {"display_name": "MIG small", "slug": "mig", "gpu": {"backend": "mig", "mig_profile": "1g.10gb"}},
    {"display_name": "HAMi half", "slug": "hami", "gpu": {"fraction": 0.5, "backend": "hami"}},
    {"display_name": "KAI quarter", "slug": "kai", "gpu": {"fraction": 0.25, "backend": "kai"}},
    {"display_name": "Whole", "slug": "whole", "gpu": {"count": 1}},
    {"display_name": "Too big", "slug": "huge", "gpu": {"count": 64}},
]

DRA_PROFILES = [
    {"display_name": "CPU", "slug": "cpu", "default": True},
    {"display_name": "A100 quarter", "slug": "quarter", "gpu": {"fraction": 0.25, "backend": "dra", "product": A100}},
    {"display_name": "Any quarter", "slug": "any-quarter", "gpu": {"fraction": 0.25, "backend": "dra"}},
    {"display_name": "MIG 1g.10gb", "slug": "mig", "gpu": {"backend": "dra", "mig_profile": "1g.10gb"}},
    {"display_name": "MIG 2g.20gb", "slug": "mig-absent", "gpu": {"backend": "dra", "mig_profile": "2g.20gb"}},
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # KubeSpawner keeps one shared API client per event loop and closes it only when the hub
    # shuts down; a pooled connection of an earlier test's loop may be collected during a later
    # test. That is a test-harness artefact (one hub process has one loop), not a leak.
    for item in items:
        if "spawner_k8s" in str(item.path):
            item.add_marker(
                pytest.mark.filterwarnings("ignore:Exception ignored in:pytest.PytestUnraisableExceptionWarning")
            )


@pytest.fixture
async def cluster_spawner(testbed, k8s_namespace) -> AsyncIterator[Callable]:
    async for factory in _spawners_on(testbed, k8s_namespace, {"type": "kwok"}, PROFILES):
        yield factory


@pytest.fixture
async def dra_spawner(dra_testbed, dra_namespace) -> AsyncIterator[Callable]:
    """Spawners on the ``dra`` cluster (GPUs as ResourceSlices), with :data:`DRA_PROFILES`."""
    async for factory in _spawners_on(dra_testbed, dra_namespace, {}, DRA_PROFILES):
        yield factory


async def _spawners_on(testbed, namespace: str, node_selector: dict, profiles: list[dict]) -> AsyncIterator[Callable]:
    from fracnb_spawner.cluster.kube import close_shared_clients, kubeconfig_at
    from fracnb_spawner.hubstate import HubState
    from fracnb_spawner.spawner import FractionalSpawner

    def factory(options: dict, *, config: Config | None = None, user: str = "alice") -> FractionalSpawner:
        cfg = config or Config()
        cfg.FractionalSpawner.namespace = namespace
        cfg.FractionalSpawner.start_timeout = cfg.FractionalSpawner.get("start_timeout", 30)
        cfg.FractionalSpawner.delete_grace_period = 0
        if "node_selector" not in cfg.FractionalSpawner:
            # Pods on the local nodes run their command for real; these tests only need KWOK's.
            cfg.FractionalSpawner.node_selector = node_selector
        if "profile_list" not in cfg.FractionalSpawner:
            cfg.FractionalSpawner.profile_list = profiles
        spawner = FractionalSpawner(_mock=True, config=cfg)
        spawner.user.name = user
        spawner.pod_name = f"jupyter-{user}"
        if spawner.enable_user_namespaces:  # KubeSpawner names it in __init__, from the mock user
            spawner.namespace = spawner._expand_user_properties(spawner.user_namespace_template)
        spawner.user_options = options
        return spawner

    with kubeconfig_at(testbed.kubeconfig):
        yield factory
        await HubState.discard()
        await close_shared_clients()


@pytest.fixture
def batch_namespace(dra_testbed) -> Iterator[str]:
    """A namespace for batch pods on the ``dra`` cluster, with the shipped batch PriorityClass."""
    batch_priority(dra_testbed)
    name = dra_testbed.create_namespace()
    try:
        yield name
    finally:
        dra_testbed.delete_namespace(name)
