"""Reclaim on the real control plane: a notebook queued behind lower-priority batch pods gets their GPUs.

On the ``dra`` cluster kube-scheduler does not preempt for claims, so the fracnb service's reclaim pass
evicts through the real Eviction API (PodDisruptionBudgets read by the apiserver, their status written
by kube-controller-manager's disruption controller), and the hub's real GPU queue lifts the notebook's
gate once the claims are freed. On the ``mixed`` cluster kube-scheduler preempts a batch pod holding an
extended resource by itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timezone

import pytest
from prometheus_client import CollectorRegistry

from bench.queue import A100_CEL
from bench.reclaim import BATCH, WHOLE_NODE, batch_priority
from fracnb_spawner.reclaim.victims import Policy
from fracnb_spawner.service.choices import hub_choices
from fracnb_spawner.service.reclaiming import (
    KubeReclaimApi,
    Reclaimer,
    ReclaimMetrics,
    remember_recent_evictions,
    want_from_choices,
)
from fracnb_testbed.procs import wait_until, wait_until_async
from tests.spawner.queue.fakes import FakeClock
from tests.spawner_k8s.dra import claim_allocated
from tests.spawner_k8s.test_dra_queue import a100_config, gated, pod_of, queued

pytestmark = pytest.mark.k8s


def claim_template(testbed, namespace: str, name: str, memory: str | None) -> None:
    """An A100 claim: ``memory`` of it, or (None) the whole device."""
    exactly: dict = {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression": A100_CEL}}]}
    if memory:
        exactly["capacity"] = {"requests": {"memory": memory}}
    else:
        exactly |= {"allocationMode": "ExactCount", "count": 1}
    rest = testbed.rest()
    try:
        rest.create(
            f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates",
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
             "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}},
        )  # fmt: skip
    finally:
        rest.close()


async def holding(testbed, namespace: str, name: str, template: str, *, annotations: dict | None = None) -> dict:
    """A batch pod (priority -100) whose claim from ``template`` kube-scheduler has allocated."""
    testbed.create_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "train"}, "annotations": annotations or {}},
        "spec": {
            "priorityClassName": BATCH, "terminationGracePeriodSeconds": 30,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [{"name": "train", "image": "train", "resources": {"claims": [{"name": "gpu"}]}}],
        },
    })  # fmt: skip
    await claim_allocated(testbed, namespace, name)
    return pod_of(testbed, namespace, name)


@pytest.fixture
async def reclaimer(dra_testbed) -> AsyncIterator[Callable[..., Reclaimer]]:
    """Make the service's reclaim pass over the testbed's apiserver, knowing the hub's A100 choices; their API
    clients are closed after the test (an unclosed one leaves sockets for a later garbage collection)."""
    opened = []

    def make(*, per_minute: int = 10, clock=None, policy: Policy | None = None) -> Reclaimer:
        opened.append(dra_testbed.api_client())
        want = want_from_choices(hub_choices(a100_config()))
        extra = {"clock": clock} if clock else {}
        metrics = ReclaimMetrics(CollectorRegistry())
        return Reclaimer(KubeReclaimApi(opened[-1]), policy or Policy(), per_minute, want, metrics, **extra)

    yield make
    for api_client in opened:
        await api_client.close()


async def deletion_grace(testbed, namespace: str, name: str, watching: asyncio.Event) -> int | None:
    """The grace period of the pod's first deletion, from a watch (KWOK shortens it to 0 right after)."""
    from kubernetes_asyncio import client, watch

    async with testbed.api_client() as api:
        stream = watch.Watch()
        pods = client.CoreV1Api(api).list_namespaced_pod
        async for event in stream.stream(pods, namespace, field_selector=f"metadata.name={name}", timeout_seconds=60):
            watching.set()
            if event["object"].metadata.deletion_timestamp:
                stream.stop()
                return event["object"].metadata.deletion_grace_period_seconds
    return None


def sample(reclaim: Reclaimer, name: str, **labels: str) -> float:
    value = reclaim.metrics.reclaims.collect()[0] if name == "reclaims" else reclaim.metrics.latency.collect()[0]
    suffix = "_total" if name == "reclaims" else "_count"
    return next(s.value for s in value.samples if s.name.endswith(suffix) and s.labels == labels)


async def test_a_queued_notebook_gets_the_a100_a_training_pod_held(
    dra_spawner, dra_testbed, dra_namespace, batch_namespace, reclaimer
) -> None:
    claim_template(dra_testbed, batch_namespace, "whole-a100", None)
    await holding(dra_testbed, batch_namespace, "train", "whole-a100")
    alice = dra_spawner({"profile": "quarter"}, user="alice", config=a100_config())
    started = await queued(alice)
    watching = asyncio.Event()
    grace = asyncio.ensure_future(deletion_grace(dra_testbed, batch_namespace, "train", watching))
    await asyncio.wait_for(watching.wait(), 30)
    reclaim = reclaimer()
    done = await reclaim.reclaim_pass()
    assert done == [((batch_namespace, "train"), (dra_namespace, alice.pod_name), "evicted")]
    assert await asyncio.wait_for(grace, 30) == 30  # the pod's own terminationGracePeriodSeconds
    (event,) = [e for e in dra_testbed.events_for(batch_namespace, "train") if e["reason"] == "Reclaimed"]
    assert event["message"] == "reclaimed for a 0.25 GPU notebook of alice"
    assert (await started).startswith("http://")  # the claim freed, the hub's queue lifted the gate
    assert not gated(dra_testbed, dra_namespace, alice.pod_name)
    assert await reclaim.reclaim_pass() == []  # nothing waits now; the latency is observed
    assert sample(reclaim, "reclaims", outcome="evicted") == 1
    assert sample(reclaim, "latency") == 1
    await reclaim.api.core.api_client.close()
    await alice.stop()


async def test_a_disruption_budget_is_respected(
    dra_spawner, dra_testbed, dra_namespace, batch_namespace, reclaimer
) -> None:
    claim_template(dra_testbed, batch_namespace, "whole-a100", None)
    await holding(dra_testbed, batch_namespace, "train", "whole-a100")
    rest = dra_testbed.rest()
    path = f"/apis/policy/v1/namespaces/{batch_namespace}/poddisruptionbudgets"
    try:
        rest.create(path, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "train"},
                           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}}})  # fmt: skip
    finally:
        rest.close()
    wait_until(
        lambda: (dra_testbed.get(f"{path}/train").get("status") or {}).get("currentHealthy") == 1,
        what="the disruption controller's status of the budget",
        timeout=30,
    )
    bo = dra_spawner({"profile": "quarter"}, user="bo", config=a100_config())
    started = await queued(bo)
    reclaim = reclaimer()
    assert await reclaim.reclaim_pass() == []  # the budget allows no disruption: not chosen
    assert await reclaim.api.evict((batch_namespace, "train")) == "refused-by-budget"  # nor would the API
    assert pod_of(dra_testbed, batch_namespace, "train") is not None
    assert gated(dra_testbed, dra_namespace, bo.pod_name)
    rest = dra_testbed.rest()
    try:  # the owner allows it now
        status, answer = rest.request("PATCH", f"{path}/train", {"spec": {"minAvailable": 0}})
    finally:
        rest.close()
    assert status == 200, answer
    wait_until(
        lambda: (dra_testbed.get(f"{path}/train").get("status") or {}).get("disruptionsAllowed") == 1,
        what="the budget allowing one disruption",
        timeout=30,
    )
    assert [outcome for *_, outcome in await reclaim.reclaim_pass()] == ["evicted"]
    assert (await started).startswith("http://")
    await reclaim.api.core.api_client.close()
    await bo.stop()


async def test_a_notebook_is_never_evicted(dra_spawner, dra_testbed, dra_namespace, batch_namespace, reclaimer) -> None:
    """Not even one below the waiting notebook's priority: a pod JupyterHub made is someone's work."""
    claim_template(dra_testbed, batch_namespace, "whole-a100", None)
    await holding(dra_testbed, batch_namespace, "low-notebook", "whole-a100",
                  annotations={"hub.jupyter.org/username": "cy"})  # fmt: skip
    dee = dra_spawner({"profile": "quarter"}, user="dee", config=a100_config())
    started = await queued(dee)
    reclaim = reclaimer()
    assert await reclaim.reclaim_pass() == []
    assert pod_of(dra_testbed, batch_namespace, "low-notebook")["metadata"].get("deletionTimestamp") is None
    dra_testbed.delete_pod(batch_namespace, "low-notebook", grace_seconds=0)
    assert (await started).startswith("http://")
    await reclaim.api.core.api_client.close()
    await dee.stop()


async def test_the_eviction_limit_per_minute(
    dra_spawner, dra_testbed, dra_namespace, batch_namespace, reclaimer
) -> None:
    claim_template(dra_testbed, batch_namespace, "half-a100", "40Gi")
    await holding(dra_testbed, batch_namespace, "train-1", "half-a100")
    await holding(dra_testbed, batch_namespace, "train-2", "half-a100")
    first = dra_spawner({"profile": "half"}, user="eve", config=a100_config())
    second = dra_spawner({"profile": "half"}, user="fay", config=a100_config())
    first_started, second_started = await queued(first), await queued(second)
    clock = FakeClock()
    reclaim = reclaimer(per_minute=1, clock=clock)
    (evicted,) = await reclaim.reclaim_pass()
    assert evicted[1:] == ((dra_namespace, first.pod_name), "evicted")  # the queue's first, first
    assert (await first_started).startswith("http://")
    clock.advance(59)
    assert await reclaim.reclaim_pass() == []  # one a minute: fay waits
    assert gated(dra_testbed, dra_namespace, second.pod_name)
    clock.advance(2)
    (evicted,) = await reclaim.reclaim_pass()
    assert evicted[1:] == ((dra_namespace, second.pod_name), "evicted")
    assert (await second_started).startswith("http://")
    await reclaim.api.core.api_client.close()
    for spawner in (first, second):
        await spawner.stop()


async def test_a_restarted_service_keeps_to_the_limit_and_times_the_reclaim_by_the_pod(
    dra_spawner, dra_testbed, dra_namespace, batch_namespace, reclaimer
) -> None:
    """The count of the minute is read back from the Reclaimed events the service wrote before it restarted;
    the latency runs to the notebook's own scheduling time, however late the pass that sees it."""
    claim_template(dra_testbed, batch_namespace, "half-a100", "40Gi")
    await holding(dra_testbed, batch_namespace, "train-1", "half-a100")
    await holding(dra_testbed, batch_namespace, "train-2", "half-a100")
    first = dra_spawner({"profile": "half"}, user="gus", config=a100_config())
    second = dra_spawner({"profile": "half"}, user="hal", config=a100_config())
    first_started, second_started = await queued(first), await queued(second)
    (evicted,) = await reclaimer(per_minute=1).reclaim_pass()
    assert evicted[1:] == ((dra_namespace, first.pod_name), "evicted")
    assert (await first_started).startswith("http://")
    await wait_until_async(  # the event goes out after the eviction's answer
        lambda: [e for e in dra_testbed.events_for(batch_namespace, evicted[0][1]) if e["reason"] == "Reclaimed"],
        what="the reclaim's event",
        timeout=30,
    )

    clock = FakeClock()  # the restarted service: a monotonic count of its own, the wall time of now
    clock.wall = datetime.now(timezone.utc)
    restarted = reclaimer(per_minute=1, clock=clock)
    await remember_recent_evictions(restarted)
    assert await restarted.reclaim_pass() == []  # the minute's one eviction was made before the restart
    assert gated(dra_testbed, dra_namespace, second.pod_name)
    clock.count += 61  # a minute on the service's monotonic clock; its wall clock stays the pods' (real) time
    (evicted,) = await restarted.reclaim_pass()
    assert evicted[1:] == ((dra_namespace, second.pod_name), "evicted")
    assert (await second_started).startswith("http://")
    clock.count += 600  # the pass that sees hal served comes ten minutes late
    assert await restarted.reclaim_pass() == []
    latency = restarted.metrics.latency.collect()[0]
    count, total = (next(s.value for s in latency.samples if s.name.endswith(suffix)) for suffix in ("_count", "_sum"))
    assert count == 1
    assert total < 60, total  # from the eviction to hal's PodScheduled condition, not to the late pass
    for spawner in (first, second):
        await spawner.stop()


def gpu_pod(name: str, units: int, priority_class: str | None, affinity: dict | None = None) -> dict:
    """A pod asking ``units`` of nvidia.com/gpu on a KWOK node (``affinity``: which)."""
    spec: dict = {"nodeSelector": {"type": "kwok"}, "terminationGracePeriodSeconds": 30, "containers": [
        {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(units)}}}]}  # fmt: skip
    if affinity:
        spec["affinity"] = affinity
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def only_on(node: str) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}  # fmt: skip


def node_of(testbed, namespace: str, name: str) -> str | None:
    return (pod_of(testbed, namespace, name) or {}).get("spec", {}).get("nodeName")


async def test_a_notebook_does_not_preempt_batch_while_another_card_has_room(testbed, k8s_namespace) -> None:
    """kube-scheduler preempts only for a pod that fits nowhere: the training node's batch pod stays."""
    batch_priority(testbed)
    node, on_node = WHOLE_NODE, only_on(WHOLE_NODE)
    testbed.create_pod(k8s_namespace, gpu_pod("train", 8, BATCH, on_node))
    wait_until(lambda: node_of(testbed, k8s_namespace, "train") == node, what="the batch pod bound", timeout=30)
    testbed.create_pod(k8s_namespace, gpu_pod("jupyter-ida", 1, None))
    wait_until(
        lambda: node_of(testbed, k8s_namespace, "jupyter-ida") is not None, what="the notebook bound", timeout=60
    )
    assert node_of(testbed, k8s_namespace, "jupyter-ida") != node
    assert pod_of(testbed, k8s_namespace, "train")["metadata"].get("deletionTimestamp") is None


async def test_kube_scheduler_preempts_a_batch_pod_holding_an_extended_resource(testbed, k8s_namespace) -> None:
    """What the queue relies on for device plugins: units held below the notebook's priority count as
    free, and kube-scheduler frees them itself once the notebook's pod is ungated."""
    batch_priority(testbed)
    node, on_node = WHOLE_NODE, only_on(WHOLE_NODE)
    testbed.create_pod(k8s_namespace, gpu_pod("train", 8, BATCH, on_node))
    wait_until(lambda: node_of(testbed, k8s_namespace, "train") == node, what="the batch pod bound", timeout=30)
    testbed.create_pod(k8s_namespace, gpu_pod("jupyter-gil", 1, None, on_node))
    wait_until(
        lambda: node_of(testbed, k8s_namespace, "jupyter-gil") == node,
        what="the notebook bound to the node the batch pod held",
        timeout=60,
    )
    assert pod_of(testbed, k8s_namespace, "train") is None or pod_of(testbed, k8s_namespace, "train")["metadata"].get(
        "deletionTimestamp"
    )
    wait_until(  # kube-scheduler's events go out through its broadcaster, not before the bind
        lambda: [e for e in testbed.events_for(k8s_namespace, "train") if e["reason"] == "Preempted"],
        what="kube-scheduler's event saying it preempted the batch pod",
        timeout=30,
    )
