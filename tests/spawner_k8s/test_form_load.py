"""Spawn-form loads cost the apiserver a bounded number of LISTs, however many users load it at once."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from traitlets.config import Config

from fracnb_testbed.audit import count_by_resource
from fracnb_testbed.procs import wait_until_async
from tests.gpu_jobs import gpu_job
from tests.spawner_k8s.helpers import form_shows, free_on_form

pytestmark = pytest.mark.k8s

QUARTER = [{"display_name": "Quarter", "slug": "quarter", "gpu": {"fraction": 0.25}}]
USERS = 40


def hub_requests(testbed, hub_agent: str, verb: str = "list", cluster_wide: bool | None = None) -> Counter[str]:
    """The hub's requests the apiserver has answered so far, by resource (its audit log)."""
    return count_by_resource(testbed.audited_requests(), hub_agent, verb, cluster_wide)


def form_config() -> Config:
    config = Config()
    config.FractionalSpawner.profile_list = QUARTER
    config.FractionalSpawner.node_selector = {"fracnb.io/runner": "local"}
    config.FracnbQuotas.default_user_quota = 1  # the form also checks each choice against the quota
    return config


async def test_concurrent_form_loads_share_one_watch(cluster_spawner, testbed) -> None:
    viewers = [cluster_spawner({}, user=f"viewer{i}", config=form_config()) for i in range(USERS)]
    for viewer in viewers:
        viewer.user.groups = []
    agent = viewers[0].api.api_client.user_agent
    before = hub_requests(testbed, agent, cluster_wide=False)
    before_view = hub_requests(testbed, agent, cluster_wide=True)
    started = time.monotonic()
    first = await asyncio.gather(*(viewer.render_options_form() for viewer in viewers))
    again = await asyncio.gather(*(viewer.render_options_form() for viewer in viewers))
    elapsed = time.monotonic() - started
    spent = hub_requests(testbed, agent, cluster_wide=False) - before
    view = hub_requests(testbed, agent, cluster_wide=True) - before_view
    assert all("4 free now" in html for html in first + again)
    # One LIST of nodes and one of pods, cluster-wide, for the shared view; in the hub's namespace one of its
    # pods, and KubeSpawner's pod reflector's: once, and again at each of its watch restarts (after 10 s
    # without an event), which a slow run reaches.
    # Uncached, each of the 80 loads listed nodes, all pods and the hub's pods: 240 LISTs.
    assert view["nodes"] <= 1, view
    assert view["pods"] <= 1, view
    assert spent["pods"] <= 2 + elapsed // 10, (spent, elapsed)


async def test_the_view_follows_changes_across_watch_reconnects_without_listing_again(
    cluster_spawner, testbed, k8s_namespace, monkeypatch
) -> None:
    from fracnb_spawner.cluster import view as clusterview

    monkeypatch.setattr(clusterview, "WATCH_SECONDS", 1)  # the server ends each watch after a second
    config = form_config()
    config.FracnbQuotas.default_user_quota = None
    viewer = cluster_spawner({}, user="viewer", config=config)
    assert await free_on_form(viewer) == 4
    # The hub's cluster-wide requests are the view's (KubeSpawner's pod reflector watches its namespace).
    agent = viewer.api.api_client.user_agent
    lists = hub_requests(testbed, agent, cluster_wide=True)
    watches = hub_requests(testbed, agent, "watch", cluster_wide=True)

    await wait_until_async(
        lambda: (hub_requests(testbed, agent, "watch", cluster_wide=True) - watches)["nodes"] >= 3,
        what="the view's node watch ended and resumed 3 times",
        timeout=15,
        interval=0.05,
    )
    testbed.create_pod(k8s_namespace, gpu_job("batch-job", shares=2))
    await form_shows(lambda: viewer, 2)
    testbed.delete_pod(k8s_namespace, "batch-job", grace_seconds=0)
    await form_shows(lambda: viewer, 4)
    relisted = hub_requests(testbed, agent, cluster_wide=True) - lists
    # Nodes never change here: each of the 3+ reconnects resumed from the last version. Pods may be listed
    # once more: in a busy shared testbed a filtered watch's last version can expire (410 Gone) between
    # reconnects, and a new LIST is then right.
    assert relisted["nodes"] == 0, relisted
    assert relisted["pods"] <= 1, relisted
