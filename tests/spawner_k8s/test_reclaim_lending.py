"""The lending objects as shipped (helm-values/lending.yaml), on the real control plane: the training Job's pod
on the A100 a notebook waits for is evicted by the service's reclaim pass; under the budget shape shipped
before (``maxUnavailable: 1``) kube-controller-manager's disruption controller cannot sync the budget, it allows
no eviction, and the service says so once.

The testbed runs no Job controller (testbed/fracnb_testbed/controlplane.py), so the Job's pod is made as the
Job controller makes it: the Job's template, its labels, and the Job as controlling owner. That owner is what
the disruption controller looks up for the budget's scale.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from bench.queue import A100_CEL
from fracnb_spawner.reclaim.budgets import controller_of, sync_failure
from fracnb_spawner.reclaim.victims import Policy
from fracnb_spawner.service.choices import hub_choices
from fracnb_spawner.service.reclaiming import KubeReclaimApi, Reclaimer, ReclaimMetrics, want_from_choices
from fracnb_testbed.procs import wait_until, wait_until_async
from tests.spawner_k8s.dra import claim_allocated
from tests.spawner_k8s.test_dra_queue import a100_config, gated, pod_of, queued

pytestmark = pytest.mark.k8s

LENDING = Path(__file__).resolve().parents[2] / "helm-values" / "lending.yaml"
JOB = "train-dra"
# The budget lending.yaml shipped before: maxUnavailable needs a scale subresource, which a Job has not.
OLD_BUDGET = {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "train"}}}


def shipped_all(kind: str) -> list[dict]:
    """The objects of ``kind`` in helm-values/lending.yaml."""
    return [doc for doc in yaml.safe_load_all(LENDING.read_text()) if doc and doc["kind"] == kind]


def shipped(kind: str, name: str | None = None) -> dict:
    """A copy of the object of ``kind`` (and ``name``) in helm-values/lending.yaml."""
    return copy.deepcopy(next(d for d in shipped_all(kind) if name is None or d["metadata"]["name"] == name))


def in_namespace(obj: dict, namespace: str) -> dict:
    """``obj`` with its namespace edited, as lending.yaml asks before applying it."""
    obj["metadata"]["namespace"] = namespace
    return obj


def apply_lending(testbed, namespace: str) -> dict:
    """The shipped PriorityClass, claim template, DRA training Job and budgets (none now) in ``namespace``; the
    Job as created.

    The template is pinned to the testbed's A100 (the cluster has an H100 and MIG devices too; the waiting
    notebook asks for the A100), which an admin may do the same way.
    """
    template = in_namespace(shipped("ResourceClaimTemplate"), namespace)
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [{"cel": {"expression": A100_CEL}}]
    rest = testbed.rest()
    try:
        rest.create("/apis/scheduling.k8s.io/v1/priorityclasses", shipped("PriorityClass"), exist_ok=True)
        rest.create(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates", template)
        for pdb in shipped_all("PodDisruptionBudget"):
            rest.create(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", in_namespace(pdb, namespace))
        return rest.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", in_namespace(shipped("Job", JOB), namespace))
    finally:
        rest.close()


async def run_job_pod(testbed, namespace: str, job: dict) -> dict:
    """The Job's pod as the Job controller makes it, once kube-scheduler has allocated its claim.

    KWOK's fast stages end a Job's pod as soon as it runs (pod-complete), and its claim with it. So the pod
    is made gated, its Ready condition written as a kubelet would, and only then let to the scheduler:
    KWOK leaves a ready pod in phase Pending alone. The disruption controller counts ready pods, and reclaim
    reads claims, neither the phase.
    """
    template, metadata = job["spec"]["template"], job["metadata"]
    name = f"{metadata['name']}-x7k2p"
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": metadata["name"], "uid": metadata["uid"],
             "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    testbed.create_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": template["metadata"]["labels"], "ownerReferences": [owner]},
        "spec": {**template["spec"], "schedulingGates": [{"name": "example.com/ready-first"}]},
    })  # fmt: skip
    rest = testbed.rest()
    try:
        ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
        status, answer = rest.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status", ready)
    finally:
        rest.close()
    assert status == 200, answer
    testbed.patch_pod(namespace, name, {"spec": {"schedulingGates": None}})
    await claim_allocated(testbed, namespace, name)
    return pod_of(testbed, namespace, name)


@pytest.fixture
async def reclaimer(dra_testbed) -> AsyncIterator[Callable[[], Reclaimer]]:
    """The service's reclaim pass over the testbed's apiserver, knowing the hub's A100 choices."""
    opened = []

    def make() -> Reclaimer:
        opened.append(dra_testbed.api_client())
        want = want_from_choices(hub_choices(a100_config()))
        return Reclaimer(KubeReclaimApi(opened[-1]), Policy(), 10, want, ReclaimMetrics(CollectorRegistry()))

    yield make
    for api_client in opened:
        await api_client.close()


async def waiting(testbed, namespace: str, spawner) -> asyncio.Future:
    """The spawner's start, once its pod waits in the queue behind its gate (what the reclaim pass reads)."""
    started = await queued(spawner)
    await wait_until_async(
        lambda: gated(testbed, namespace, spawner.pod_name), what=f"{spawner.pod_name} gated", timeout=30
    )
    return started


def budget_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "fracnb.reclaim" and "PodDisruptionBudget" in r.getMessage()
    ]


async def test_reclaim_takes_the_shipped_training_job_for_a_waiting_notebook(
    dra_spawner, dra_testbed, dra_namespace, batch_namespace, *, reclaimer, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="fracnb.reclaim")
    train = await run_job_pod(dra_testbed, batch_namespace, apply_lending(dra_testbed, batch_namespace))
    assert controller_of(train) == ("batch", "Job", JOB)
    alice = dra_spawner({"profile": "quarter"}, user="alice", config=a100_config())
    started = await waiting(dra_testbed, dra_namespace, alice)
    reclaim = reclaimer()
    done = await reclaim.reclaim_pass()
    assert done == [((batch_namespace, train["metadata"]["name"]), (dra_namespace, alice.pod_name), "evicted")]
    assert (await started).startswith("http://")
    assert budget_warnings(caplog) == []
    await alice.stop()


async def test_the_old_budget_shape_allows_no_eviction_and_is_named_once(
    dra_spawner, dra_testbed, dra_namespace, batch_namespace, *, reclaimer, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="fracnb.reclaim")
    train = await run_job_pod(dra_testbed, batch_namespace, apply_lending(dra_testbed, batch_namespace))
    path = f"/apis/policy/v1/namespaces/{batch_namespace}/poddisruptionbudgets"
    rest = dra_testbed.rest()
    try:
        rest.create(path, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "train"},
                           "spec": OLD_BUDGET})  # fmt: skip
    finally:
        rest.close()
    wait_until(
        lambda: sync_failure(dra_testbed.get(f"{path}/train")) is not None,
        what="the disruption controller's SyncFailed condition on the budget",
        timeout=30,
    )
    status = dra_testbed.get(f"{path}/train")["status"]
    assert "does not implement the scale subresource" in sync_failure({"status": status})
    assert status.get("disruptionsAllowed", 0) == 0
    bo = dra_spawner({"profile": "quarter"}, user="bo", config=a100_config())
    started = await waiting(dra_testbed, dra_namespace, bo)
    reclaim = reclaimer()
    assert await reclaim.reclaim_pass() == []  # the budget is honoured: the notebook would wait out its wait
    assert await reclaim.reclaim_pass() == []
    (warning,) = budget_warnings(caplog)  # once, not every pass
    assert warning.startswith(
        f"PodDisruptionBudget {batch_namespace}/train allows reclaim no eviction of its pods: its maxUnavailable 1"
        f" needs the scale subresource of the pods' controller, and Job {JOB} has none"
    )
    assert pod_of(dra_testbed, batch_namespace, train["metadata"]["name"])["metadata"].get("deletionTimestamp") is None
    assert gated(dra_testbed, dra_namespace, bo.pod_name)

    await change_budget(dra_testbed, f"{path}/train", {"maxUnavailable": None, "minAvailable": 1})
    assert await reclaim.reclaim_pass() == []  # synced now, but it keeps the Job's one pod
    assert "its minAvailable 1 keeps all 1 ready pods it covers" in budget_warnings(caplog)[-1]

    await change_budget(dra_testbed, f"{path}/train", {"minAvailable": 0}, allowed=1)
    assert [outcome for *_, outcome in await reclaim.reclaim_pass()] == ["evicted"]
    assert (await started).startswith("http://")
    assert len(budget_warnings(caplog)) == 2
    await bo.stop()


async def change_budget(testbed, path: str, spec: dict, *, allowed: int = 0) -> None:
    """Merge ``spec`` into the budget and wait for the disruption controller's status of it."""
    rest = testbed.rest()
    try:
        status, answer = rest.request("PATCH", path, {"spec": spec})
    finally:
        rest.close()
    assert status == 200, answer

    def synced() -> bool:
        pdb = testbed.get(path)
        status = pdb.get("status") or {}
        return (
            status.get("observedGeneration") == pdb["metadata"]["generation"]
            and status.get("currentHealthy") == 1
            and status.get("disruptionsAllowed", 0) == allowed
        )

    await wait_until_async(synced, what=f"the budget synced, allowing {allowed}", timeout=30)
