"""Quotas under concurrency and after a hub restart, and the form's free counts vs the real scheduler."""

from __future__ import annotations

import asyncio
from fractions import Fraction
from types import SimpleNamespace

import pytest
from tornado import web
from traitlets.config import Config

from fracnb_spawner.hubstate import HubState
from fracnb_testbed.procs import wait_until_async
from tests.gpu_jobs import gpu_job
from tests.spawner_k8s.helpers import form_shows, free_on_form

pytestmark = pytest.mark.k8s

QUARTER = [{"display_name": "Quarter", "slug": "quarter", "gpu": {"fraction": 0.25}}]


def team_config(quota: object) -> Config:
    config = Config()
    config.FractionalSpawner.profile_list = QUARTER
    config.FracnbQuotas.group_quotas = {"team-a": quota}
    # Generous: 24 pods start at once on a 2-core machine; the test is about admission, not speed.
    config.FractionalSpawner.start_timeout = 180
    return config


def in_team(spawner, team: SimpleNamespace) -> None:
    spawner.user.groups = [team]


def held_fractions(testbed, namespace: str) -> Fraction:
    return sum(
        (Fraction(p["metadata"]["annotations"]["fracnb.io/gpu-fraction"]) for p in testbed.list_pods(namespace)),
        Fraction(0),
    )


async def test_fifty_concurrent_spawns_never_exceed_the_group_quota(cluster_spawner, testbed, k8s_namespace) -> None:
    names = [f"dev{i:02d}" for i in range(50)]
    team = SimpleNamespace(name="team-a", users=[SimpleNamespace(name=n) for n in names])
    spawners = [cluster_spawner({"profile": "quarter"}, user=n, config=team_config(6)) for n in names]
    for spawner in spawners:
        in_team(spawner, team)
    results = await asyncio.gather(*(s.start() for s in spawners), return_exceptions=True)
    started = [r for r in results if isinstance(r, str)]
    refused = [r for r in results if isinstance(r, web.HTTPError)]
    assert len(started) == 24, [r for r in results if not isinstance(r, (str, web.HTTPError))]
    assert len(refused) == 26
    assert {r.status_code for r in refused} == {403}
    message = getattr(refused[0], "message", "") or refused[0].log_message
    assert "team-a uses 6 of 6 GPUs; this choice needs 0.25 GPU" in message
    assert held_fractions(testbed, k8s_namespace) == 6
    await asyncio.gather(*(s.stop() for s, r in zip(spawners, results, strict=True) if isinstance(r, str)))


async def test_restarted_hub_recounts_from_pods(cluster_spawner, testbed, k8s_namespace) -> None:
    names = ["ann", "bob", "cid"]
    team = SimpleNamespace(name="team-a", users=[SimpleNamespace(name=n) for n in names])
    first = [cluster_spawner({"profile": "quarter"}, user=n, config=team_config("1/2")) for n in names[:2]]
    for spawner in first:
        in_team(spawner, team)
        await spawner.start()
    await HubState.discard()  # a new hub process starts with an empty ledger
    late = cluster_spawner({"profile": "quarter"}, user="cid", config=team_config("1/2"))
    in_team(late, team)
    with pytest.raises(web.HTTPError) as caught:
        await late.start()
    assert caught.value.status_code == 403
    assert held_fractions(testbed, k8s_namespace) == Fraction(1, 2)
    await first[0].stop()
    await testbed.wait_for_pod(k8s_namespace, first[0].pod_name, lambda p: p is None, timeout=30)
    again = cluster_spawner({"profile": "quarter"}, user="cid", config=team_config("1/2"))
    in_team(again, team)
    await again.start()  # the stopped server's fraction is free again: neither forgotten nor double-counted
    for spawner in (first[1], again):
        await spawner.stop()


async def test_form_free_count_matches_the_scheduler(cluster_spawner, testbed, k8s_namespace) -> None:
    config = Config()
    # Without the queue, so that the fifth pod goes to the scheduler (test_queue.py has it queued).
    config.FractionalSpawner.profile_list = [{**QUARTER[0], "queue": {"max_wait": 0}}]
    config.FractionalSpawner.node_selector = {"fracnb.io/runner": "local"}
    config.FractionalSpawner.cmd = ["python3", "-c", "import time; time.sleep(600)"]
    config.FractionalSpawner.start_timeout = 30

    def viewer():
        return cluster_spawner({}, user="viewer", config=Config(config))

    assert await free_on_form(viewer()) == 4
    running = []
    for i in range(4):
        spawner = cluster_spawner({"profile": "quarter"}, user=f"fill{i}", config=Config(config))
        await spawner.start()
        running.append(spawner)
        await form_shows(viewer, 3 - i)
    extra = cluster_spawner({"profile": "quarter"}, user="extra", config=Config(config))
    start = asyncio.ensure_future(extra.start())
    await wait_until_async(
        lambda: any(e.get("reason") == "FailedScheduling" for e in testbed.events_for(k8s_namespace, extra.pod_name)),
        what="the fifth pod's FailedScheduling event",
        timeout=30,
    )
    assert not start.done(), "the form said 0 free and the scheduler agrees: the fifth pod waits"
    await running[0].stop()
    await asyncio.wait_for(start, timeout=30)
    await form_shows(viewer, 0)
    for spawner in [*running[1:], extra]:
        await spawner.stop()
    await form_shows(viewer, 4)


async def test_form_follows_pods_the_hub_did_not_start(cluster_spawner, testbed, k8s_namespace) -> None:
    config = Config()
    config.FractionalSpawner.profile_list = QUARTER
    config.FractionalSpawner.node_selector = {"fracnb.io/runner": "local"}

    def viewer():
        return cluster_spawner({}, user="viewer", config=Config(config))

    await form_shows(viewer, 4)
    testbed.create_pod(k8s_namespace, gpu_job("batch-job", shares=3))
    await form_shows(viewer, 1)  # once the scheduler has bound it
    testbed.delete_pod(k8s_namespace, "batch-job", grace_seconds=0)
    await form_shows(viewer, 4)
