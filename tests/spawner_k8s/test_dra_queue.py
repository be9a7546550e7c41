"""DRA choices in the GPU queue, on the testbed's ``dra`` cluster: gated pods whose claims the real
kube-scheduler allocates only once the hub lifts the gate, in queue order, with each waiter's fit
decided by the memory left on the devices."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest
from traitlets.config import Config

from fracnb_spawner.common.podkeys import QUEUE_GATE, SLOT_KIND_LABEL
from fracnb_spawner.form import rows as form
from fracnb_spawner.form import spawnform
from fracnb_spawner.queue.order import wait_deadline
from fracnb_testbed.procs import wait_until_async
from tests.spawner_k8s.dra import A100, allocation_of, claims_in, claims_owned_by, templates_in
from tests.spawner_k8s.helpers import ticket_of

pytestmark = pytest.mark.k8s

KIND = "gpu.nvidia.com.NVIDIA-A100-SXM4-80GB"


def a100_config() -> Config:
    config = Config()
    config.FractionalSpawner.profile_list = [
        {"display_name": "A100 quarter", "slug": "quarter", "gpu": {"fraction": 0.25, "backend": "dra", "product": A100}},
        {"display_name": "A100 half", "slug": "half", "gpu": {"fraction": 0.5, "backend": "dra", "product": A100}},
    ]  # fmt: skip
    config.FractionalSpawner.start_timeout = 60
    return config


def pod_of(testbed, namespace: str, name: str) -> dict | None:
    return next((p for p in testbed.list_pods(namespace) if p["metadata"]["name"] == name), None)


def gated(testbed, namespace: str, name: str) -> bool:
    found = pod_of(testbed, namespace, name)
    return found is not None and QUEUE_GATE in [g["name"] for g in found["spec"].get("schedulingGates") or []]


def scheduled_reason(testbed, namespace: str, name: str) -> str | None:
    """What ``kubectl get pods`` shows as the pod's status while it is not scheduled."""
    found = pod_of(testbed, namespace, name) or {}
    conditions = (found.get("status") or {}).get("conditions") or []
    return next((c.get("reason") for c in conditions if c.get("type") == "PodScheduled"), None)


async def fill_the_a100(dra_spawner) -> list:
    """Four quarters: the A100's 80 GiB in 20 GiB claims."""
    spawners = [dra_spawner({"profile": "quarter"}, user=f"fill{i}", config=a100_config()) for i in range(4)]
    for spawner in spawners:
        await spawner.start()
    return spawners


async def queued(spawner) -> asyncio.Future:
    task = asyncio.ensure_future(spawner.start())
    await wait_until_async(
        lambda: ticket_of(spawner) is not None and ticket_of(spawner).position is not None,
        what=f"{spawner.user.name}'s place in the queue",
        timeout=30,
    )
    return task


async def settle(spawner, allocated: int) -> None:
    """Wait until the hub's view shows ``allocated`` claims, then let the queue act on it at once."""
    view = spawner.hub_state.cluster(spawner.api, spawner.log).device_view()
    await wait_until_async(
        lambda: len(view.claims.objects()) == allocated, what=f"{allocated} allocated claims in the view", timeout=30
    )
    await spawner.hub_state.gpu_queue(spawner.api, spawner.log).reconcile()


async def test_the_fifth_quarter_queues_gated_and_starts_when_one_stops(
    dra_spawner, dra_testbed, dra_namespace
) -> None:
    running = await fill_the_a100(dra_spawner)
    fifth = dra_spawner({"profile": "quarter"}, user="fifth", config=a100_config())
    task = await queued(fifth)
    assert gated(dra_testbed, dra_namespace, fifth.pod_name)
    await wait_until_async(
        lambda: scheduled_reason(dra_testbed, dra_namespace, fifth.pod_name) == "SchedulingGated",
        what="the pod shown as SchedulingGated",
        timeout=30,
    )
    pod = pod_of(dra_testbed, dra_namespace, fifth.pod_name)
    assert pod["metadata"]["labels"][SLOT_KIND_LABEL] == KIND
    # The hub makes the gated pod's claim right after the pod, owned by it: a queued pod the hub deletes (its
    # wait over) takes its claim along. The scheduler allocates nothing to it while the gate is on.
    await wait_until_async(
        lambda: claims_owned_by(dra_testbed, dra_namespace, fifth.pod_name), what="the gated pod's claim", timeout=30
    )
    (claim,) = claims_owned_by(dra_testbed, dra_namespace, fifth.pod_name)
    assert claim["metadata"]["name"] == f"{fifth.pod_name}-gpu"
    assert [ref["uid"] for ref in claim["metadata"]["ownerReferences"]] == [pod["metadata"]["uid"]]
    assert not (claim.get("status") or {}).get("allocation")
    (claim,) = claims_owned_by(dra_testbed, dra_namespace, fifth.pod_name)
    assert not (claim.get("status") or {}).get("allocation")
    assert fifth.queue.status_text().startswith("Queued for a 0.25 GPU (dra): 1st in line.")
    viewer = dra_spawner({}, user="viewer", config=a100_config())
    rows = await spawnform.annotate(
        viewer.choosing, profiles := await viewer.resolve_profiles(), form.describe(profiles, viewer.gpu_defaults())
    )
    assert (rows[("quarter", None, None)].free, rows[("quarter", None, None)].queue) == (
        0,
        "queue: 1 waiting, no estimate",
    )
    assert rows[("half", None, None)].queue == "queue: 1 waiting, no estimate"  # the same GPUs: the same queue
    messages: list[str] = []

    async def read() -> None:
        async for event in fifth.progress():
            messages.append(event["message"])

    reader = asyncio.ensure_future(read())
    await wait_until_async(
        lambda: any(m.startswith("Queued for a 0.25 GPU (dra): 1st in line.") for m in messages),
        what="the queue's progress message",
        timeout=30,
    )
    await running[0].stop()
    assert (await asyncio.wait_for(task, timeout=45)).startswith("http://")
    assert allocation_of(dra_testbed, dra_namespace, fifth.pod_name)["consumedCapacity"] == {"memory": "20Gi"}
    await asyncio.wait_for(reader, 10)
    for spawner in [*running[1:], fifth]:
        await spawner.stop()
    await wait_until_async(
        lambda: claims_in(dra_testbed, dra_namespace) == [], what="the claims to go with their pods", timeout=30
    )
    assert templates_in(dra_testbed, dra_namespace) == []


async def test_waiters_start_in_queue_order_each_when_its_slice_fits(dra_spawner, dra_testbed, dra_namespace) -> None:
    running = await fill_the_a100(dra_spawner)
    half = dra_spawner({"profile": "half"}, user="half", config=a100_config())
    quarter = dra_spawner({"profile": "quarter"}, user="quarter", config=a100_config())
    half_task = await queued(half)
    quarter_task = await queued(quarter)
    assert (ticket_of(half).position, ticket_of(quarter).position) == (1, 2)  # one queue for both sizes
    # 20 GiB free: the quarter would fit, but the half came first and does not: nobody starts.
    await running[0].stop()
    await settle(half, 3)
    assert gated(dra_testbed, dra_namespace, half.pod_name)
    assert gated(dra_testbed, dra_namespace, quarter.pod_name)
    # 40 GiB free: the half starts, the quarter waits for the next.
    await running[1].stop()
    await asyncio.wait_for(half_task, timeout=45)
    assert allocation_of(dra_testbed, dra_namespace, half.pod_name)["consumedCapacity"] == {"memory": "40Gi"}
    await settle(half, 3)
    assert gated(dra_testbed, dra_namespace, quarter.pod_name)
    assert not quarter_task.done()
    await running[2].stop()
    await asyncio.wait_for(quarter_task, timeout=45)
    assert allocation_of(dra_testbed, dra_namespace, quarter.pod_name)["device"] == "gpu-0"
    for spawner in (running[3], half, quarter):
        await spawner.stop()
    await wait_until_async(
        lambda: claims_in(dra_testbed, dra_namespace) == [], what="the claims to go with their pods", timeout=30
    )


async def test_cancel_while_queued_leaves_no_pod_or_claim(dra_spawner, dra_testbed, dra_namespace) -> None:
    running = await fill_the_a100(dra_spawner)
    waiting = dra_spawner({"profile": "quarter"}, user="leaver", config=a100_config())
    task = await queued(waiting)
    assert gated(dra_testbed, dra_namespace, waiting.pod_name)
    task.cancel()  # what the hub does to a pending spawn on "Stop My Server" / DELETE
    await asyncio.gather(task, return_exceptions=True)
    await waiting.stop()
    assert pod_of(dra_testbed, dra_namespace, waiting.pod_name) is None
    await wait_until_async(
        lambda: not claims_owned_by(dra_testbed, dra_namespace, waiting.pod_name),
        what="the queued pod's claim to go",
        timeout=30,
    )
    assert not waiting.hub_state.gpu_queue(waiting.api, waiting.log).tickets
    for spawner in running:
        await spawner.stop()


async def test_a_queued_pod_nobody_waits_on_goes_with_its_claim(dra_spawner, dra_testbed, dra_namespace) -> None:
    running = await fill_the_a100(dra_spawner)
    config = a100_config()
    config.FractionalSpawner.profile_list[0]["queue"] = {"max_wait": 3}
    left = dra_spawner({"profile": "quarter"}, user="gone", config=config)
    task = await queued(left)
    await wait_until_async(
        lambda: claims_owned_by(dra_testbed, dra_namespace, left.pod_name), what="the gated pod's claim", timeout=30
    )
    # The hub goes away: its spawn ends without stopping the pod; the next hub's sweep finds it past its wait.
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    deadline = wait_deadline(pod_of(dra_testbed, dra_namespace, left.pod_name))
    await wait_until_async(
        lambda: datetime.now(timezone.utc) > deadline, what="the end of the maximum wait", timeout=30
    )
    await left.hub_state.gpu_queue(left.api, left.log).sweep()
    await wait_until_async(
        lambda: pod_of(dra_testbed, dra_namespace, left.pod_name) is None, what="the pod to go", timeout=30
    )
    await wait_until_async(
        lambda: not claims_owned_by(dra_testbed, dra_namespace, left.pod_name), what="its claim to go", timeout=30
    )
    for spawner in running:
        await spawner.stop()
