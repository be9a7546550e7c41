"""Demand for GPU slots, read from the pods the hub's queue leaves in the cluster. Pure.

The hub creates a queued server's pod with the ``fracnb.io/queue`` scheduling gate and lifts
the gate when the pod's turn comes (docs/contract.md); with the kueue engine, Kueue gates it
(``kueue.x-k8s.io/admission``) until the team has quota. A pod carrying either gate
(:func:`.podkeys.is_waiting`) is a spawn waiting for a slot of the kind its ``fracnb.io/slot-kind``
label names; two pods compete for the same capacity exactly when those labels are equal, so they
are only compared, never parsed. While any pod waits for kind K, the culler gives idle servers
holding kind K their profile's shorter ``idle_timeout_under_demand``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any

from fracnb_spawner.common.podkeys import (
    PRIORITY_ANNOTATION,
    QUEUED_AT_ANNOTATION,
    SERVERNAME_ANNOTATION,
    SLOT_KIND_LABEL,
    USERNAME_ANNOTATION,
    has_queue_gate,
    is_waiting,
)
from fracnb_spawner.culling import isoformat, parse_timestamp
from fracnb_spawner.queue.localqueues import local_queue_of
from fracnb_spawner.queue.order import Waiting, queue_order
from fracnb_spawner.quota.policy import pod_profile

Pod = Mapping[str, Any]


def slot_kind(pod: Pod) -> str:
    """The kind of GPU slot the pod competes for; "" for CPU-only pods and pods of other versions."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get(SLOT_KIND_LABEL, "")


def queued_at(pod: Pod) -> datetime | None:
    """When the spawn joined the queue: its annotation, else (unreadable or missing) the pod's creation."""
    metadata = pod.get("metadata") or {}
    for raw in ((metadata.get("annotations") or {}).get(QUEUED_AT_ANNOTATION), metadata.get("creationTimestamp")):
        try:
            moment = parse_timestamp(raw if isinstance(raw, str) else None)
        except ValueError:
            continue
        if moment is not None:
            return moment
    return None


def queue_priority(pod: Pod) -> int:
    """The pod's queue priority; 0 when it has none or it is not a decimal integer."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(PRIORITY_ANNOTATION, "0")
    try:
        return int(raw)
    except (TypeError, ValueError):
        return 0


def demand_since(pods: Iterable[Pod], *, kueue_gate: bool = True) -> dict[str, datetime]:
    """Slot kind -> since when someone has been waiting for it (the earliest waiting spawn's queue time), in the
    hub's queue or, with the kueue engine and ``kueue_gate``, on Kueue's gate (a notebook whose team's quota is
    used). Where Kueue's own demand was read, per cohort (:func:`.kueue.quota.local_queue_demand`), ``kueue_gate``
    is False: a notebook on Kueue's gate waits for its cohort's quota, not for every server of its slot kind.

    Waiting pods without a slot kind or any readable time are skipped: they cannot say which
    servers they wait for, or since when.
    """
    since: dict[str, datetime] = {}
    for pod in pods:
        kind = slot_kind(pod)
        waiting = is_waiting(pod) if kueue_gate else has_queue_gate(pod)
        moment = queued_at(pod) if kind and waiting else None
        if moment is not None and (kind not in since or moment < since[kind]):
            since[kind] = moment
    return since


def queue_lengths(pods: Iterable[Pod]) -> dict[str, int]:
    """Slot kind -> how many spawns wait for it, in either engine's queue ("" for waiting pods without a slot
    kind)."""
    lengths: dict[str, int] = {}
    for pod in pods:
        if is_waiting(pod):
            kind = slot_kind(pod)
            lengths[kind] = lengths.get(kind, 0) + 1
    return lengths


@dataclass(frozen=True)
class QueueEntry:
    user: str
    server: str
    profile: str
    slot_kind: str
    priority: int
    queued_at: datetime | None
    namespace: str
    pod: str
    engine: str = "builtin"  # whose gate holds it: "builtin" (fracnb's queue) or "kueue" (its team's quota)
    local_queue: str = ""  # with "kueue": "namespace/name" of the LocalQueue it waits in

    def as_json(self, now: datetime) -> dict[str, Any]:
        waited = None if self.queued_at is None else max((now - self.queued_at).total_seconds(), 0.0)
        return {
            "user": self.user,
            "server": self.server,
            "profile": self.profile,
            "slot_kind": self.slot_kind,
            "priority": self.priority,
            "queued_at": isoformat(self.queued_at),
            "waited_seconds": waited,
            "namespace": self.namespace,
            "pod": self.pod,
            "engine": self.engine,
            "local_queue": self.local_queue,
        }


def queue_entries(pods: Iterable[Pod]) -> list[QueueEntry]:
    """The waiting spawns (:func:`.podkeys.is_waiting`) in the hub's order (``queue.order.queue_order``),
    unknown queue times last.

    The service knows no quota shares, so within a priority it lists by arrival; the hub also
    puts the group using less of its quota first, so it may lift gates in a slightly different order.
    Spawns on Kueue's gate (``engine`` "kueue") are in the same list by the same rule; Kueue admits
    them in its own order, per team ClusterQueue.
    """
    entries: dict[str, QueueEntry] = {}
    for pod in pods:
        if not is_waiting(pod):
            continue
        metadata = pod.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        entry = QueueEntry(
            user=annotations.get(USERNAME_ANNOTATION, ""),
            server=annotations.get(SERVERNAME_ANNOTATION, ""),
            profile=pod_profile(metadata),
            slot_kind=slot_kind(pod),
            priority=queue_priority(pod),
            queued_at=queued_at(pod),
            namespace=metadata.get("namespace", ""),
            pod=metadata.get("name", ""),
            engine="builtin" if has_queue_gate(pod) else "kueue",
            local_queue=local_queue_of(pod),
        )
        entries[f"{entry.namespace}/{entry.pod}"] = entry
    places = [
        Waiting(key, entry.priority, Fraction(0), entry.queued_at or _UNKNOWN_TIME) for key, entry in entries.items()
    ]
    return [entries[place.key] for place in queue_order(places)]


_UNKNOWN_TIME = datetime.max.replace(tzinfo=timezone.utc)
