"""The GPU queue against the real apiserver and scheduler: gated pods, order, restart, cancel, max wait."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from kubespawner import KubeSpawner
from prometheus_client import REGISTRY
from tornado import web
from traitlets.config import Config

from fracnb_spawner.common.podkeys import QUEUE_GATE, QUEUED_AT_ANNOTATION, SLOT_KIND_LABEL
from fracnb_spawner.hubstate import HubState
from fracnb_testbed.procs import wait_until_async
from tests.gpu_jobs import gpu_job
from tests.spawner_k8s.helpers import ticket_of

pytestmark = pytest.mark.k8s

# The quarter slots of the testbed's two a100-ts4 KWOK nodes (32 each).
TS4 = {"type": "kwok", "nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"}
SLOTS = 64


def quarter_config(max_wait: object = 120) -> Config:
    config = Config()
    config.FractionalSpawner.profile_list = [
        {"display_name": "Quarter", "slug": "quarter", "gpu": {"fraction": 0.25}, "queue": {"max_wait": max_wait}}
    ]
    config.FractionalSpawner.start_timeout = 60
    config.FracnbQuotas.group_quotas = {"team-a": 8, "team-b": 8}
    config.FracnbQueue.group_priorities = {"staff": 10}
    return config


async def fill_every_slot(testbed, namespace: str) -> list[str]:
    names = [
        testbed.create_pod(namespace, gpu_job(f"filler-{i:02d}", node_selector=TS4))["metadata"]["name"]
        for i in range(SLOTS)
    ]
    await wait_until_async(
        lambda: sum(1 for p in testbed.list_pods(namespace) if p["spec"].get("nodeName")) == SLOTS,
        what=f"{SLOTS} filler pods bound",
        timeout=60,
    )
    return names


def pod(testbed, namespace: str, name: str) -> dict | None:
    return next((p for p in testbed.list_pods(namespace) if p["metadata"]["name"] == name), None)


def gated(testbed, namespace: str, name: str) -> bool:
    found = pod(testbed, namespace, name)
    return found is not None and QUEUE_GATE in [g["name"] for g in found["spec"].get("schedulingGates") or []]


def gave_up_count(reason: str) -> float:
    return REGISTRY.get_sample_value("fracnb_queue_gave_up_total", {"reason": reason}) or 0


def member(spawner, group: str, *users: str) -> None:
    spawner.user.groups = [SimpleNamespace(name=group, users=[SimpleNamespace(name=u) for u in users])]


def in_group(spawner, group: str = "team-b"):
    member(spawner, group, spawner.user.name)
    return spawner


async def queued(spawners) -> list:
    """Start spawners one after the other, each waiting until its pod is gated (so enqueue times differ)."""
    tasks = []
    for spawner in spawners:
        tasks.append(asyncio.ensure_future(spawner.start()))
        # A place is given before the pod is made: wait for both, so that a test may then drop the spawn
        # (a hub going away) and find the gated pod keeping that place.
        await wait_until_async(
            lambda s=spawner: (
                ticket_of(s) is not None and ticket_of(s).position is not None and s.queue.pod_in_queue() is not None
            ),
            what=f"{spawner.user.name}'s place in the queue and its gated pod",
            timeout=60,
        )
    return tasks


async def test_queued_spawns_start_in_order_as_slots_free(cluster_spawner, testbed, k8s_namespace) -> None:
    fillers = await fill_every_slot(testbed, k8s_namespace)
    config = quarter_config()
    # carol (team-b, holds nothing), bob (team-a, already holds GPUs), dave (staff: higher priority)
    carol = cluster_spawner({"profile": "quarter"}, user="carol", config=config)
    bob = cluster_spawner({"profile": "quarter"}, user="bob", config=config)
    dave = cluster_spawner({"profile": "quarter"}, user="dave", config=config)
    member(carol, "team-b", "carol")
    member(bob, "team-a", "bob", "erin")
    member(dave, "staff", "dave")
    tasks = await queued([bob, carol, dave])
    for spawner in (bob, carol, dave):
        assert gated(testbed, k8s_namespace, spawner.pod_name)
        found = pod(testbed, k8s_namespace, spawner.pod_name)
        assert found["metadata"]["labels"][SLOT_KIND_LABEL] == "nvidia.com-gpu.shared.4.time-slicing.kwok"
        assert found["metadata"]["annotations"][QUEUED_AT_ANNOTATION].endswith("Z")
    # dave first (priority); then carol (her team uses less of its quota than bob's), though bob came first
    # erin, bob's teammate, holds 2 GPUs elsewhere (an eighth-slot node with room): team-a uses 2 of its 8
    holding = gpu_job("erin-gpu", node_selector=TS4)
    holding["metadata"] = {
        "name": "erin-gpu",
        "labels": {SLOT_KIND_LABEL: "elsewhere"},
        "annotations": {"fracnb.io/gpu-fraction": "2", "hub.jupyter.org/username": "erin"},
    }
    holding["spec"]["nodeSelector"] = {**TS4, "nvidia.com/gpu.replicas": "8"}
    testbed.create_pod(k8s_namespace, holding)  # fmt: skip
    await wait_until_async(
        lambda: (ticket_of(dave).position, ticket_of(carol).position) == (1, 2),
        what="dave 1st and carol 2nd",
        timeout=60,
    )
    assert ticket_of(bob).position == 3
    assert "1st in line" in dave.queue.status_text()
    waits = REGISTRY.get_sample_value("fracnb_queue_wait_seconds_count") or 0
    started = []
    for index, expected in enumerate((dave, carol, bob)):
        testbed.delete_pod(k8s_namespace, fillers[index], grace_seconds=0)
        pending = [t for t in tasks if t not in started]
        done, _ = await asyncio.wait(pending, timeout=60, return_when=asyncio.FIRST_COMPLETED)
        assert len(done) == 1, f"{len(done)} spawns started when slot {index + 1} was freed"
        (winner,) = done
        started.append(winner)
        assert tasks.index(winner) == [bob, carol, dave].index(expected), [s.user.name for s in (bob, carol, dave)]
        assert isinstance(winner.result(), str)
    assert REGISTRY.get_sample_value("fracnb_queue_wait_seconds_count") == waits + 3
    await asyncio.gather(*(s.stop() for s in (bob, carol, dave)))


async def test_cancel_while_queued_leaves_no_pod(cluster_spawner, testbed, k8s_namespace) -> None:
    await fill_every_slot(testbed, k8s_namespace)
    spawner = in_group(cluster_spawner({"profile": "quarter"}, user="frank", config=quarter_config()))
    (task,) = await queued([spawner])
    assert gated(testbed, k8s_namespace, spawner.pod_name)
    cancelled = gave_up_count("cancelled")
    task.cancel()  # what the hub does to a pending spawn on "Stop My Server" / DELETE
    await asyncio.gather(task, return_exceptions=True)
    await spawner.stop()
    assert gave_up_count("cancelled") == cancelled + 1
    assert pod(testbed, k8s_namespace, spawner.pod_name) is None
    assert not spawner.hub_state.queue.tickets
    held = await spawner.choosing._listed_allocations()
    assert not [a for a in held if a.user == spawner.user.name]
    assert spawner.hub_state.ledger.reserved(spawner.user.name, "") is None


async def test_maximum_wait_fails_cleanly(cluster_spawner, testbed, k8s_namespace) -> None:
    await fill_every_slot(testbed, k8s_namespace)
    spawner = in_group(cluster_spawner({"profile": "quarter"}, user="gina", config=quarter_config(max_wait=3)))
    gave_up = gave_up_count("max-wait")
    with pytest.raises(web.HTTPError) as refused:
        await spawner.start()
    assert gave_up_count("max-wait") == gave_up + 1  # on the hub's /hub/metrics (the default registry)
    message = refused.value.jupyterhub_message
    assert "No 0.25 GPU (time-slicing) became free within 3 s" in message
    assert "smaller share or a CPU-only profile, or try again later" in message
    await wait_until_async(
        lambda: pod(testbed, k8s_namespace, spawner.pod_name) is None, what="the pod to go", timeout=60
    )


async def test_restarted_hub_keeps_the_place(cluster_spawner, testbed, k8s_namespace) -> None:
    fillers = await fill_every_slot(testbed, k8s_namespace)
    first = in_group(cluster_spawner({"profile": "quarter"}, user="henry", config=quarter_config()))
    second = in_group(cluster_spawner({"profile": "quarter"}, user="iris", config=quarter_config()))
    tasks = await queued([first, second])
    queued_at = pod(testbed, k8s_namespace, first.pod_name)["metadata"]["annotations"][QUEUED_AT_ANNOTATION]
    # The hub goes away: its spawns end without stopping the pods, the queue and view stop.
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await HubState.discard()
    assert gated(testbed, k8s_namespace, first.pod_name)
    assert gated(testbed, k8s_namespace, second.pod_name)
    # A new hub: iris comes back first, henry after, yet henry keeps his earlier place.
    again_second = in_group(cluster_spawner({"profile": "quarter"}, user="iris", config=quarter_config()))
    again_first = in_group(cluster_spawner({"profile": "quarter"}, user="henry", config=quarter_config()))
    tasks = await queued([again_second, again_first])
    await wait_until_async(lambda: ticket_of(again_first).position == 1, what="the first place taken over", timeout=60)
    # Taken over: deleted, made again.
    await wait_until_async(
        lambda: gated(testbed, k8s_namespace, first.pod_name), what="the pod gated again", timeout=60
    )
    assert pod(testbed, k8s_namespace, first.pod_name)["metadata"]["annotations"][QUEUED_AT_ANNOTATION] == queued_at
    testbed.delete_pod(k8s_namespace, fillers[0], grace_seconds=0)
    done, _ = await asyncio.wait(tasks, timeout=60, return_when=asyncio.FIRST_COMPLETED)
    assert done == {tasks[1]}
    await asyncio.gather(*(s.stop() for s in (again_first, again_second)))
    # Iris's spawn still waits for a slot: the hub would end it with her stop; here it would wait out its
    # maximum wait (2 min).
    tasks[0].cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_restarted_hub_forgets_the_spawn_but_not_the_place(cluster_spawner, testbed, k8s_namespace) -> None:
    await fill_every_slot(testbed, k8s_namespace)
    spawner = in_group(cluster_spawner({"profile": "quarter"}, user="kate", config=quarter_config()))
    (task,) = await queued([spawner])
    task.cancel()  # the hub goes away with the spawn pending
    await asyncio.gather(task, return_exceptions=True)
    await HubState.discard()
    # The restarted hub checks the server it had on record: not running, so it forgets it without
    # calling stop() (JupyterHub stops only what poll() says runs), and the pod keeps its place.
    again = in_group(cluster_spawner({"profile": "quarter"}, user="kate", config=quarter_config()))
    assert await again.poll() == 0
    assert gated(testbed, k8s_namespace, again.pod_name)
    assert "Your place in the GPU queue is kept until" in again.queue.kept_place_text()
    # In the hub that queued it, the pod counts as pending (poll: running), so "Stop My Server" removes it.
    spawner = in_group(cluster_spawner({"profile": "quarter"}, user="lena", config=quarter_config()))
    (task,) = await queued([spawner])
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert await spawner.poll() is None
    await again.stop(now=True)  # an admin's stop, or the sweep after the maximum wait
    await wait_until_async(
        lambda: pod(testbed, k8s_namespace, again.pod_name) is None, what="its pod to go", timeout=60
    )
    await spawner.stop()
    await wait_until_async(
        lambda: pod(testbed, k8s_namespace, spawner.pod_name) is None, what="the pod to go", timeout=60
    )


async def test_fifty_concurrent_spawns_into_a_full_cluster(cluster_spawner, testbed, k8s_namespace) -> None:
    fillers = await fill_every_slot(testbed, k8s_namespace)
    names = [f"dev{i:02d}" for i in range(50)]
    config = quarter_config(max_wait=300)
    config.FracnbQuotas.group_quotas = {"team-a": 6}  # 24 quarters
    config.FractionalSpawner.start_timeout = 180
    spawners = [cluster_spawner({"profile": "quarter"}, user=n, config=config) for n in names]
    for spawner in spawners:
        member(spawner, "team-a", *names)
    tasks = [asyncio.ensure_future(s.start()) for s in spawners]
    await wait_until_async(lambda: sum(1 for t in tasks if t.done()) == 26, what="26 spawns refused", timeout=120)
    refused = [t.exception() for t in tasks if t.done()]
    assert all(isinstance(e, web.HTTPError) and e.status_code == 403 for e in refused), refused
    waiting = [s for s, t in zip(spawners, tasks, strict=True) if not t.done()]
    await wait_until_async(
        lambda: sorted(ticket_of(s).position or 0 for s in waiting) == list(range(1, 25)),
        what="places 1 to 24",
        timeout=60,
    )
    assert sum(1 for name in names if gated(testbed, k8s_namespace, f"jupyter-{name}")) == 24
    for name in fillers[:24]:
        testbed.delete_pod(k8s_namespace, name, grace_seconds=0)
    results = await asyncio.wait_for(asyncio.gather(*(t for t in tasks if not t.done())), 240)
    assert all(isinstance(url, str) for url in results)
    assert not any(gated(testbed, k8s_namespace, f"jupyter-{name}") for name in names)
    await asyncio.gather(*(s.stop() for s in waiting))


async def test_progress_shows_the_place_not_the_patience_message(cluster_spawner, testbed, k8s_namespace) -> None:
    fillers = await fill_every_slot(testbed, k8s_namespace)
    config = quarter_config()
    # KubeSpawner's "taking longer" after 1 s, then every second.
    config.FractionalSpawner.slow_spawn_message_threshold = 1
    config.FractionalSpawner.slow_spawn_message_frequency = 1
    spawner = in_group(cluster_spawner({"profile": "quarter"}, user="jack", config=config))
    (task,) = await queued([spawner])
    messages: list[str] = []
    unfiltered: list[str] = []

    async def read(stream, into: list[str]) -> None:
        async for event in stream:
            into.append(event["message"])

    reader = asyncio.ensure_future(read(spawner.progress(), messages))
    await wait_until_async(
        lambda: any(m.startswith("Queued for a 0.25 GPU (time-slicing): 1st in line.") for m in messages),
        what="the queue's progress message",
        timeout=60,
    )
    # KubeSpawner's own progress, read beside ours and started after it: once it has said "taking
    # longer" three times, ours would have too, were the queue headline not taking their place.
    # (KubeSpawner before 7.1 has no such message.)
    witness = asyncio.ensure_future(read(KubeSpawner.progress(spawner), unfiltered))
    if KubeSpawner.class_traits().get("slow_spawn_message_threshold") is not None:
        await wait_until_async(
            lambda: sum("taking longer" in m for m in unfiltered) >= 3,
            what="KubeSpawner's third 'taking longer'",
            timeout=30,
        )
    assert not [m for m in messages if "taking longer" in m], messages
    # Nor once its turn comes: KubeSpawner's clock would count the wait in the queue.
    testbed.delete_pod(k8s_namespace, fillers[0], grace_seconds=0)
    await asyncio.wait_for(task, 60)
    await asyncio.wait_for(asyncio.gather(reader, witness), 10)
    assert not [m for m in messages if "taking longer" in m], messages
    await spawner.stop()


async def test_a_slot_freed_before_the_queued_pod_exists_still_starts_it(
    cluster_spawner, testbed, k8s_namespace, monkeypatch
) -> None:
    fillers = await fill_every_slot(testbed, k8s_namespace)
    spawner = in_group(cluster_spawner({"profile": "quarter"}, user="kate", config=quarter_config()))
    api = spawner.api
    lifts: list[str] = []
    patch, create = api.patch_namespaced_pod, api.create_namespaced_pod

    async def patch_recorded(name, namespace, body, **kwargs):
        lifts.append(name)
        return await patch(name, namespace, body, **kwargs)

    async def create_after_the_gate_was_tried(namespace, body, **kwargs):
        # The spawn has joined the queue; its pod is not created yet when a slot frees.
        testbed.delete_pod(k8s_namespace, fillers[0], grace_seconds=0)
        # Tried on a pod not there yet: 404.
        await wait_until_async(lambda: spawner.pod_name in lifts, what="a lift of the pod", timeout=10)
        return await create(namespace, body, **kwargs)

    monkeypatch.setattr(api, "patch_namespaced_pod", patch_recorded)
    monkeypatch.setattr(api, "create_namespaced_pod", create_after_the_gate_was_tried)
    assert isinstance(await asyncio.wait_for(spawner.start(), timeout=30), str)
    assert lifts.count(spawner.pod_name) == 2  # again once the pod was there
    assert not gated(testbed, k8s_namespace, spawner.pod_name)
    await spawner.stop()


async def test_slots_held_by_lower_priority_pods_do_not_queue_the_spawn(
    cluster_spawner, testbed, k8s_namespace
) -> None:
    """A batch queue below notebooks: the spawn goes to the scheduler, which preempts a batch pod for it."""
    status, answer = testbed._call(
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "batch-below"},
            "value": -100,
        },
    )
    assert status in (201, 409), answer
    batch = []
    for index in range(SLOTS):
        manifest = gpu_job(f"filler-{index:02d}", node_selector=TS4)
        manifest["spec"].update(priorityClassName="batch-below", terminationGracePeriodSeconds=0)
        batch.append(testbed.create_pod(k8s_namespace, manifest)["metadata"]["name"])
    await wait_until_async(
        lambda: sum(1 for p in testbed.list_pods(k8s_namespace) if p["spec"].get("nodeName")) == SLOTS,
        what=f"{SLOTS} batch pods bound",
        timeout=60,
    )
    spawner = in_group(cluster_spawner({"profile": "quarter"}, user="lena", config=quarter_config()))
    assert isinstance(await asyncio.wait_for(spawner.start(), timeout=60), str)
    assert spawner.queue.went_straight  # never queued behind a batch pod
    bound = pod(testbed, k8s_namespace, spawner.pod_name)
    assert bound["spec"].get("nodeName")
    await wait_until_async(
        lambda: sum(1 for name in batch if pod(testbed, k8s_namespace, name) is None) == 1,
        what="one batch pod preempted",
        timeout=60,
    )
    await spawner.stop()
