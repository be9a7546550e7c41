"""A team's GPU quota in Kueue, for the spawn form's line per choice, and the demand for it, for the culler
(``c.FracnbQueue.engine = "kueue"``). Pure.

With the kueue engine a spawn waits when its team's ClusterQueue has no unused quota left for it and nothing it may
borrow from the cohort, or when others wait before it (StrictFIFO), whatever the nodes have free. So the form
reads the team's ClusterQueue and its cohort (``spec.resourceGroups`` for the quotas, ``status.flavorsUsage`` and
``status.pendingWorkloads``) and says so before the user starts: "queue: 1 waiting for team-a's 0.25 GPU (all in
use), no estimate". Kueue gives no start estimate.

The fracnb service's culler reads the Workloads waiting for GPU quota across a cohort (:func:`local_queue_demand`):
while one waits, idle servers that hold quota it could use get their shorter idle timeout under demand.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fracnb_spawner.queue.kueue import MILLI_RESOURCE, milli_quantity, milli_to_gpus, pending_milli
from fracnb_spawner.queue.order import parse_time


@dataclass(frozen=True)
class TeamQuota:
    """A ClusterQueue's GPU quota in milli-GPUs: its own, what it uses, and what it may borrow now."""

    team: str
    nominal: int
    used: int
    pending: int  # Workloads waiting in it
    borrowable: int  # the cohort's unused quota beyond this queue's own, within its borrowing limit (lendingLimit
    # is not read: a peer that lends less than it has unused makes this too high)

    @property
    def unused(self) -> int:
        return max(0, self.nominal - self.used)


def _gpu_resources(queue: Mapping[str, Any], where: str) -> list[Mapping[str, Any]]:
    """The fracnb.io/gpu-milli entries of a ClusterQueue's ``spec.resourceGroups`` or ``status.flavorsUsage``."""
    if where == "spec":
        flavors = [f for g in (queue.get("spec") or {}).get("resourceGroups") or [] for f in g.get("flavors") or []]
    else:
        flavors = (queue.get("status") or {}).get("flavorsUsage") or []
    return [r for f in flavors for r in f.get("resources") or [] if r.get("name") == MILLI_RESOURCE]


def _nominal(queue: Mapping[str, Any]) -> int:
    return sum(milli_quantity(r.get("nominalQuota", 0)) for r in _gpu_resources(queue, "spec"))


def _used(queue: Mapping[str, Any]) -> int:
    return sum(milli_quantity(r.get("total", 0)) for r in _gpu_resources(queue, "status"))


def cohort_queues(cluster_queues: Iterable[Mapping[str, Any]], team: str) -> list[Mapping[str, Any]]:
    """``team``'s ClusterQueue first, then the others of its cohort (none outside a cohort); [] if it has none."""
    queues = list(cluster_queues)
    own = next((q for q in queues if q["metadata"]["name"] == team), None)
    if own is None:
        return []
    cohort = (own.get("spec") or {}).get("cohortName")
    return [own, *(q for q in queues if cohort and q is not own and (q.get("spec") or {}).get("cohortName") == cohort)]


def team_quota(cluster_queues: Iterable[Mapping[str, Any]], team: str) -> TeamQuota | None:
    """``team``'s quota, from every ClusterQueue (its cohort's lend what they do not use); None if it has none."""
    group = cohort_queues(cluster_queues, team)
    if not group:
        return None
    own = group[0]
    nominal, used = [_nominal(q) for q in group], [_used(q) for q in group]
    # What the whole cohort has unused beyond this queue's own: a peer's idle quota that a third team borrows
    # already is in that team's usage, not the peer's, so the peers' idle quota alone counts it twice.
    idle = max(0, sum(nominal) - sum(used) - max(0, nominal[0] - used[0]))
    limits = [milli_quantity(r["borrowingLimit"]) for r in _gpu_resources(own, "spec") if "borrowingLimit" in r]
    borrowable = min(idle, max(0, sum(limits) - max(0, used[0] - nominal[0]))) if limits else idle
    pending = int((own.get("status") or {}).get("pendingWorkloads") or 0)
    return TeamQuota(team, nominal[0], used[0], pending, borrowable)


def quota_form_text(quota: TeamQuota, need_milli: int) -> str | None:
    """The form's line for a choice of ``need_milli`` when a spawn of it would wait for Kueue now, else None."""
    if quota.pending == 0 and need_milli <= quota.unused + quota.borrowable:
        return None
    state = f"{milli_to_gpus(quota.unused)} unused" if quota.unused else "all in use"
    team = f"{quota.team}'s {milli_to_gpus(quota.nominal)} GPU"
    return f"queue: {quota.pending} waiting for {team} ({state}), no estimate"


def _pending_since(workload: Mapping[str, Any]) -> datetime | None:
    """When a Workload asking for GPUs began to wait for quota; None if it has quota or asks for none (what
    :func:`.kueue.pending_milli` counts is the GPUs of Workloads without quota)."""
    if pending_milli([workload]) <= 0:
        return None
    return parse_time((workload.get("metadata") or {}).get("creationTimestamp"))


def local_queue_demand(
    workloads: Iterable[Mapping[str, Any]],
    local_queues: Iterable[Mapping[str, Any]],
    cluster_queues: Iterable[Mapping[str, Any]],
) -> dict[str, datetime]:
    """LocalQueue ("namespace/name") -> since when a Workload has waited for GPU quota that a server in it could
    give back: in its ClusterQueue, or anywhere in that ClusterQueue's cohort (which may borrow what it frees).
    The fracnb service gives idle servers there ``idle_timeout_under_demand``, as for the builtin queue."""
    to_cluster_queue = {
        f"{q['metadata'].get('namespace')}/{q['metadata']['name']}": (q.get("spec") or {}).get("clusterQueue")
        for q in local_queues
    }
    cohort_of = {q["metadata"]["name"]: (q.get("spec") or {}).get("cohortName") or "" for q in cluster_queues}
    waiting: dict[str, datetime] = {}  # cohort, or "cq:<name>" outside one -> the earliest wait
    for workload in workloads:
        since = _pending_since(workload)
        metadata = workload.get("metadata") or {}
        queue = to_cluster_queue.get(f"{metadata.get('namespace')}/{(workload.get('spec') or {}).get('queueName')}")
        if since is None or queue is None:
            continue
        group = cohort_of.get(queue) or f"cq:{queue}"
        waiting[group] = min(since, waiting.get(group, since))
    demand = {}
    for key, queue in to_cluster_queue.items():
        group = cohort_of.get(queue or "") or f"cq:{queue}"
        if group in waiting:
            demand[key] = waiting[group]
    return demand
