"""Spawns on the real Kueue: the engine's configuration, a team with quota for one quarter GPU, a pod as it is."""

from __future__ import annotations

import asyncio
from typing import Any

from traitlets.config import Config

from tests.kueue.objects import cluster_queue, create, ensure_priority_class, flavor, local_queue


def kueue_config(testbed, max_wait: object = 120) -> Config:
    config = Config()
    config.FractionalSpawner.profile_list = [
        {"display_name": "Quarter", "slug": "quarter", "gpu": {"fraction": 0.25}, "queue": {"max_wait": max_wait}}
    ]
    config.FractionalSpawner.start_timeout = 60
    config.FracnbQueue.engine = "kueue"
    config.FracnbQueue.kueue_visibility_url = f"https://127.0.0.1:{testbed.state.ports['kueue-visibility']}"
    config.FracnbService.hibernation_timeout = 45
    return config


def one_quarter_team(testbed, namespace, users, node_labels=None):
    """A team ClusterQueue with quota for one quarter GPU (no cohort to borrow from); a LocalQueue per user.
    ``node_labels``: its flavor's (default: the KWOK nodes sliced 4 ways)."""
    ensure_priority_class(testbed, "fracnb-notebook", 1000)
    create(testbed, flavor(f"{namespace}-flavor", node_labels))
    create(testbed, cluster_queue(f"{namespace}-team", f"{namespace}-flavor", f"{namespace}-alone", 250))
    for user in users:
        create(testbed, local_queue(namespace, f"fracnb-{user}", f"{namespace}-team"))
    return f"{namespace}-team"


def pod(testbed, namespace, name):
    status, answer = testbed._call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    return answer if status == 200 else None


def watch_headlines(spawner: Any, waiting: asyncio.Future) -> tuple[list[str], asyncio.Future]:
    """The progress headlines of ``spawner``'s queued start ``waiting`` as its page gets them, collected by a
    background task (cancel it when done)."""
    headlines: list[str] = []

    async def watch() -> None:
        async for event in spawner.queue.progress(waiting.done):
            headlines.append(event["message"])

    return headlines, asyncio.ensure_future(watch())
