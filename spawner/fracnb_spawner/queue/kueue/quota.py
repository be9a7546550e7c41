"""A team's GPU quota in Kueue, for the spawn form's line per choice, and the demand for it, for the culler
(``c.FracnbQueue.engine = "kueue"``). Pure.

With the kueue engine a spawn waits when its team's ClusterQueue has no unused quota left for it and nothing it may
borrow from the cohort, or when others wait before it (StrictFIFO), whatever the nodes have free. So the form
reads the team's ClusterQueue and its cohort (``spec.resourceGroups`` for the quotas, ``status.flavorsUsage`` and
``status.pendingWorkloads``) and says so before the user starts: "queue: 1 waiting for team-a's 0.25 GPU (all in
use), about 12 min". Kueue gives no start estimate: the hub's is the progress page's (the due stops of the servers
in the LocalQueues of the team's cohort, :func:`cohort_local_queues`), for a spawn joining behind those waiting.

The fracnb service's page shows the same quotas in words (:func:`team_quotas`, :func:`admission_text`): each
team's nominal quota, its use and what it borrows or may borrow, and what Kueue would admit for a user now.

The fracnb service's culler reads the Workloads waiting for GPU quota across a cohort (:func:`local_queue_demand`):
while one waits, idle servers that hold quota it could use get their shorter idle timeout under demand.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from fractions import Fraction
from typing import Any

from fracnb_spawner.common.logsafe import escape_controls
from fracnb_spawner.common.units import gpus_text
from fracnb_spawner.queue.kueue.model import MILLI_RESOURCE, milli_quantity, milli_to_gpus, pending_milli
from fracnb_spawner.queue.order import parse_time
from fracnb_spawner.queue.text import wait_words


@dataclass(frozen=True)
class TeamQuota:
    """A ClusterQueue's GPU quota in milli-GPUs: its own, what it uses, and what it may borrow now."""

    team: str
    nominal: int
    used: int
    pending: int  # Workloads waiting in it
    # What Kueue would admit now beyond this queue's unused quota: the quota its cohort's queues lend (each
    # within its lendingLimit) less what they and every borrower use, within this queue's borrowingLimit.
    borrowable: int
    cohort: str = ""  # "": in no cohort, so nothing to borrow
    # The LocalQueues ("namespace/name") of this ClusterQueue and its cohort in the hub's namespace: the servers
    # there hold the quota a spawn would wait for, and their due stops make its estimate (read_team_quota's).
    holder_queues: frozenset[str] = frozenset()

    @property
    def unused(self) -> int:
        return max(0, self.nominal - self.used)

    @property
    def borrowed(self) -> int:
        """What it uses beyond its own quota, lent by its cohort (Kueue's ``flavorsUsage[].borrowed``)."""
        return max(0, self.used - self.nominal)


@dataclass(frozen=True)
class _FlavorQuota:
    """One ClusterQueue's fracnb.io/gpu-milli in one flavor, as Kueue's scheduler counts it."""

    nominal: int = 0
    used: int = 0
    borrowing_limit: int | None = None  # None: no limit
    lending_limit: int | None = None  # None: it lends all its unused quota

    @property
    def kept(self) -> int:
        """What it never lends: its quota beyond its lending limit (Kueue's ``localQuota``)."""
        return 0 if self.lending_limit is None else max(0, self.nominal - self.lending_limit)

    @property
    def lent(self) -> int:
        """What of its quota the cohort may use: all of it, or its lending limit."""
        return self.nominal - self.kept

    @property
    def used_in_cohort(self) -> int:
        """What of its use counts against the cohort's lent quota: the part beyond what it keeps."""
        return max(0, self.used - self.kept)


def _gpu_resources(queue: Mapping[str, Any], where: str) -> list[tuple[str, Mapping[str, Any]]]:
    """(flavor, entry) per fracnb.io/gpu-milli entry of a ClusterQueue's ``spec.resourceGroups`` or
    ``status.flavorsUsage``."""
    if where == "spec":
        flavors = [f for g in (queue.get("spec") or {}).get("resourceGroups") or [] for f in g.get("flavors") or []]
    else:
        flavors = (queue.get("status") or {}).get("flavorsUsage") or []
    return [
        (f.get("name", ""), r) for f in flavors for r in f.get("resources") or [] if r.get("name") == MILLI_RESOURCE
    ]


def _limit(entry: Mapping[str, Any], key: str) -> int | None:
    return milli_quantity(entry[key]) if entry.get(key) is not None else None


def _flavor_quotas(queue: Mapping[str, Any]) -> dict[str, _FlavorQuota]:
    """Flavor -> the queue's GPU quota in it (a flavor it only uses, e.g. left from an older spec, has 0)."""
    quotas = {
        flavor: _FlavorQuota(
            milli_quantity(entry.get("nominalQuota", 0)),
            borrowing_limit=_limit(entry, "borrowingLimit"),
            lending_limit=_limit(entry, "lendingLimit"),
        )
        for flavor, entry in _gpu_resources(queue, "spec")
    }
    for flavor, entry in _gpu_resources(queue, "status"):
        quotas[flavor] = replace(quotas.get(flavor, _FlavorQuota()), used=milli_quantity(entry.get("total", 0)))
    return quotas


def _available(own: _FlavorQuota, peers: list[_FlavorQuota]) -> int:
    """What Kueue v0.17 would admit now in one flavor of a queue in a cohort of one level (``available`` in
    ``pkg/cache/scheduler/resource_node.go``): what it keeps and does not use, plus what the cohort's lent quota
    has left, the latter within the queue's borrowing limit (less what it already borrows)."""
    members = [own, *peers]
    from_cohort = sum(q.lent for q in members) - sum(q.used_in_cohort for q in members)
    if own.borrowing_limit is not None:
        from_cohort = min(from_cohort, own.lent - own.used_in_cohort + own.borrowing_limit)
    return max(0, own.kept - own.used) + from_cohort


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
    own, *peers = [_flavor_quotas(q) for q in group]
    nominal, used = sum(q.nominal for q in own.values()), sum(q.used for q in own.values())
    cohort = (group[0].get("spec") or {}).get("cohortName") or ""
    if cohort:
        # Per flavor, as Kueue counts: a peer's idle quota that a third team borrows already is in that team's
        # use, and a peer's quota beyond its lendingLimit is never lent.
        available = sum(max(0, _available(q, [p.get(f, _FlavorQuota()) for p in peers])) for f, q in own.items())
    else:
        available = nominal - used
    pending = int((group[0].get("status") or {}).get("pendingWorkloads") or 0)
    return TeamQuota(team, nominal, used, pending, max(0, available - max(0, nominal - used)), cohort)


def cohort_local_queues(
    local_queues: Iterable[Mapping[str, Any]], cluster_queues: Iterable[Mapping[str, Any]], team: str, namespace: str
) -> frozenset[str]:
    """The LocalQueues (``namespace``'s, as "namespace/name") of ``team``'s ClusterQueue and of its cohort's."""
    group = {q["metadata"]["name"] for q in cohort_queues(cluster_queues, team)} | {team}
    pointing = (q for q in local_queues if (q.get("spec") or {}).get("clusterQueue") in group)
    return frozenset(f"{namespace}/{q['metadata']['name']}" for q in pointing)


def would_wait(quota: TeamQuota, need_milli: int) -> bool:
    """Whether a spawn of ``need_milli`` would wait for Kueue now: others wait first (StrictFIFO), or the team's
    unused quota and what it may borrow are too little."""
    return quota.pending > 0 or need_milli > quota.unused + quota.borrowable


def quota_form_text(quota: TeamQuota, need_milli: int, wait_minutes: float | None = None) -> str | None:
    """The form's line for a choice of ``need_milli`` when a spawn of it would wait for Kueue now, else None;
    ``wait_minutes``: the estimate (the progress page's, for a spawn joining now), None for none."""
    if not would_wait(quota, need_milli):
        return None
    state = f"{milli_to_gpus(quota.unused)} unused" if quota.unused else "all in use"
    team = f"{quota.team}'s {milli_to_gpus(quota.nominal)} GPU"
    return f"queue: {quota.pending} waiting for {team} ({state}), {wait_words(wait_minutes)}"


def team_quotas(cluster_queues: Iterable[Mapping[str, Any]]) -> list[TeamQuota]:
    """The quota of every ClusterQueue that has GPU quota or uses GPUs, by name: the admin page's team quotas."""
    queues = list(cluster_queues)
    names = sorted(q["metadata"]["name"] for q in queues if _gpu_resources(q, "spec") or _gpu_resources(q, "status"))
    return [quota for quota in (team_quota(queues, name) for name in names) if quota is not None]


def user_team_quota(
    local_queues: Iterable[Mapping[str, Any]],
    cluster_queues: Iterable[Mapping[str, Any]],
    local_queue: str,
    namespace: str | None,
) -> TeamQuota | None:
    """The quota of the ClusterQueue that the LocalQueue ``local_queue`` (in ``namespace``; None: any) points
    to; None without that LocalQueue or ClusterQueue."""
    for queue in local_queues:
        metadata = queue.get("metadata") or {}
        if metadata.get("name") == local_queue and namespace in (None, metadata.get("namespace")):
            return team_quota(cluster_queues, (queue.get("spec") or {}).get("clusterQueue") or "")
    return None


def _gpus(milli: int) -> str:
    return gpus_text(Fraction(milli, 1000))


def quota_text(quota: TeamQuota) -> str:
    """ "0.25 GPU" """
    return _gpus(quota.nominal)


def use_text(quota: TeamQuota) -> str:
    """ "0.25 GPU; 1 waiting" (what Kueue has admitted, and how many Workloads wait for its admission)."""
    return _gpus(quota.used) + (f"; {quota.pending} waiting" if quota.pending else "")


def borrowing_text(quota: TeamQuota) -> str:
    """ "0.25 GPU borrowed; 0.5 GPU more to borrow now, from cohort university", "none: in no cohort"."""
    if not quota.cohort:
        return "none: in no cohort"
    now = f"{_gpus(quota.borrowable)} more to borrow now" if quota.borrowable else "nothing more to borrow now"
    if not quota.borrowed:
        now = f"up to {_gpus(quota.borrowable)} to borrow now" if quota.borrowable else "nothing to borrow now"
    borrowed = f"{_gpus(quota.borrowed)} borrowed; " if quota.borrowed else ""
    return f"{borrowed}{now}, from cohort {escape_controls(quota.cohort)}"


def borrowing_note(quota: TeamQuota | None) -> str | None:
    """What borrowing means for a GPU server of ``quota``'s team, as Kueue counts it (its ClusterQueue's
    ``flavorsUsage[].borrowed``: Kueue says per team, not per Workload, which quota is lent); None while the
    team uses no more than its own quota. Kueue reclaims lent quota by preempting the borrowing team's
    Workloads (``InCohortReclamation``), the lowest priority and the latest admitted first."""
    if quota is None or not quota.borrowed:
        return None
    team, cohort = escape_controls(quota.team), escape_controls(quota.cohort)
    return (
        f"Borrowing: {team} uses {_gpus(quota.borrowed)} more than its own quota of {_gpus(quota.nominal)}, lent "
        f"by other teams of cohort {cohort}. A GPU server of {team} (yours too) may run on that lent quota, so "
        "Kueue can preempt it when a lending team takes its quota back: the server stops, and its notice says "
        "why and what was saved."
    )


def admission_text(quota: TeamQuota | None) -> str:
    """What Kueue would admit now for a user of ``quota``'s team, for their page; None: it could not be read."""
    if quota is None:
        return "Kueue admits each GPU server on its team's quota, which could not be read now."
    team = f"Kueue admits each GPU server on {escape_controls(quota.team)}'s quota"
    if quota.pending:
        waiting = f"{quota.pending} {'is' if quota.pending == 1 else 'are'} waiting for it already"
        return f"{team}, and {waiting}: a new one would wait its turn."
    if not quota.unused + quota.borrowable:
        borrow = "nothing to borrow from its cohort" if quota.cohort else "no cohort to borrow from"
        return f"{team}: its {_gpus(quota.nominal)} is all in use and there is {borrow} now, so a new one would wait."
    parts = [f"{_gpus(quota.unused)} unused"] if quota.unused else []
    parts += [f"{_gpus(quota.borrowable)} to borrow from its cohort"] if quota.borrowable else []
    return f"{team}: a new one could take up to {_gpus(quota.unused + quota.borrowable)} now ({' and '.join(parts)})."


def _pending_since(workload: Mapping[str, Any]) -> datetime | None:
    """When a Workload asking for GPUs began to wait for quota; None if it has quota or asks for none (what
    :func:`.model.pending_milli` counts is the GPUs of Workloads without quota)."""
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
