"""Spawn-form loads cost the apiserver a bounded number of LISTs, however many users load it at once."""

from __future__ import annotations

import asyncio
import re
from collections import Counter

import pytest
from traitlets.config import Config

pytestmark = pytest.mark.k8s

QUARTER = [{"display_name": "Quarter", "slug": "quarter", "gpu": {"fraction": 0.25}}]
USERS = 40
LIST_REQUESTS = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<count>\S+)$", re.MULTILINE)


def list_requests(testbed) -> Counter[str]:
    """LIST requests the apiserver has answered so far, by resource (its own metrics endpoint)."""
    counts: Counter[str] = Counter()
    for match in LIST_REQUESTS.finditer(testbed.get("/metrics")):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        if labels.get("verb") == "LIST" and labels.get("resource") in ("pods", "nodes"):
            counts[labels["resource"]] += int(float(match["count"]))
    return counts


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
    before = list_requests(testbed)
    first = await asyncio.gather(*(viewer.render_options_form() for viewer in viewers))
    again = await asyncio.gather(*(viewer.render_options_form() for viewer in viewers))
    spent = list_requests(testbed) - before
    assert all("4 free now" in html for html in first + again)
    # One LIST of nodes and one of pods for the shared view, one of pods for KubeSpawner's pod
    # reflector, and perhaps one re-LIST of it (it re-lists when a quiet watch times out).
    # Uncached, each of the 80 loads listed nodes, all pods and the hub's pods: 240 LISTs.
    assert spent["nodes"] <= 1, spent
    assert spent["pods"] <= 3, spent
