"""When training waits for a pool that notebooks borrow from, as the fracnb service's culling reads it. Pure.

A borrower (``fracnb.io/borrowed: "true"``) holds a card of the borrowable pool's slot kind. Training waits for
that pool while a pod below notebook priority (a batch PriorityClass) asks for a GPU, is not scheduled, carries no
scheduling gate (a gated pod waits for its queue's admission, not for a card), and its node selector agrees with
the borrower's (it could run there). While it does, the idle borrowers of that kind get their idle timeout under
demand, as idle servers do while notebooks wait for their own kind; a busy borrower is never stopped for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from fracnb_spawner.cluster.nodes import preemptible
from fracnb_spawner.common.podkeys import BORROWED_LABEL, SLOT_KIND_LABEL, USERNAME_ANNOTATION
from fracnb_spawner.culling import parse_timestamp

Pod = Mapping[str, Any]


def is_borrower(pod: Pod) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(BORROWED_LABEL) == "true"


def asks_for_gpu(pod: Pod) -> bool:
    """A resource claim (DRA), or an extended resource naming a GPU (``nvidia.com/gpu``, ``nvidia.com/gpu.shared``,
    ``nvidia.com/mig-1g.10gb``)."""
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return True
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        names = {*(resources.get("requests") or {}), *(resources.get("limits") or {})}
        if any("/" in name and ("gpu" in name or "/mig-" in name) for name in names):
            return True
    return False


def training_waiting(pod: Pod) -> bool:
    """A batch pod below notebook priority, unscheduled and ungated, that asks for a GPU."""
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if spec.get("nodeName") or spec.get("schedulingGates") or metadata.get("deletionTimestamp"):
        return False
    if (metadata.get("annotations") or {}).get(USERNAME_ANNOTATION) or (pod.get("status") or {}).get("phase") not in (
        None,
        "Pending",
    ):
        return False
    return preemptible(pod) and asks_for_gpu(pod)


def could_run_beside(pod: Pod, borrower: Pod) -> bool:
    """Whether ``pod``'s node selector agrees with the borrower's: no key of both with different values."""
    wanted = (pod.get("spec") or {}).get("nodeSelector") or {}
    there = (borrower.get("spec") or {}).get("nodeSelector") or {}
    return all(there[key] == value for key, value in wanted.items() if key in there)


def training_demand(borrowers: Iterable[Pod], pods: Iterable[Pod]) -> dict[str, datetime]:
    """Slot kind of borrowers -> since when training has waited for their pool (the earliest waiting batch pod's
    creation). ``pods``: live pods of every namespace."""
    waiting = [pod for pod in pods if training_waiting(pod)]
    since: dict[str, datetime] = {}
    for borrower in borrowers:
        kind = ((borrower.get("metadata") or {}).get("labels") or {}).get(SLOT_KIND_LABEL)
        if not kind or not is_borrower(borrower):
            continue
        for pod in waiting:
            moment = _created(pod)
            if moment is not None and could_run_beside(pod, borrower) and (kind not in since or moment < since[kind]):
                since[kind] = moment
    return since


def with_training_demand(demand: Mapping[str, datetime], training: Mapping[str, datetime]) -> dict[str, datetime]:
    """The slot demand with training's added: for each kind, the earlier of the two."""
    merged = dict(demand)
    for kind, moment in training.items():
        merged[kind] = min(moment, merged.get(kind, moment))
    return merged


def _created(pod: Pod) -> datetime | None:
    try:
        return parse_timestamp((pod.get("metadata") or {}).get("creationTimestamp"))
    except ValueError:
        return None
