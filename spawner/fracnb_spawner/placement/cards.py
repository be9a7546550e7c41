"""The cluster as placement reads it: each DRA card a share could use with who holds it, and whether
something waits for whole cards (a whole-card start of fracnb's, or a batch pod or claim of anyone's). Pure; the
cluster comes as the hub's watches keep it (:mod:`.cluster.slots`): pods and claims of every namespace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from fractions import Fraction
from typing import Any

from fracnb_spawner.cluster.devices import DraWant, device_ledger, schedulable_nodes
from fracnb_spawner.cluster.slots import Cluster
from fracnb_spawner.common.podkeys import (
    BUSY_SINCE_ANNOTATION,
    FRACTION_ANNOTATION,
    SLOT_KIND_LABEL,
    USERNAME_ANNOTATION,
)
from fracnb_spawner.gpu.backends import HAMI_MEMORY_PERCENT_RESOURCE, HAMI_MEMORY_RESOURCE, WHOLE_GPU_RESOURCE
from fracnb_spawner.placement.decide import CardState, Holder, busy_now

Pod = Mapping[str, Any]


def holders_by_pod(pods: Iterable[Pod], now: datetime) -> dict[tuple[str, str], Holder]:
    """Each notebook pod's holder at ``now``: its user, and busy now where its ``fracnb.io/busy-since`` is old
    enough (:func:`.decide.busy_now`)."""
    found = {}
    for pod in pods:
        metadata = pod.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        user = annotations.get(USERNAME_ANNOTATION)
        if user:
            key = (metadata.get("namespace", ""), metadata.get("name", ""))
            found[key] = Holder(user, busy_now(annotations.get(BUSY_SINCE_ANNOTATION), now))
    return found


def dra_cards(cluster: Cluster, want: DraWant, now: datetime) -> list[CardState]:
    """The shareable cards ``want`` may use (driver, product, schedulable nodes matching its selector), with
    their free memory and holders at ``now``. A holder whose pod the hub does not see is of an unknown user."""
    by_pod = holders_by_pod(cluster.pods, now)
    holders: dict[tuple[str, str, str], list[Holder]] = {}
    for claim in cluster.claims:
        owner = claim.get("owner")
        holder = by_pod.get(tuple(owner), Holder("")) if owner else Holder("")
        for result in claim["results"]:
            holders.setdefault(tuple(result["key"]), []).append(holder)
    published = {
        (slice_["pool"], device["name"]): (slice_.get("node") or slice_["pool"], device)
        for slice_ in cluster.slices
        if slice_["driver"] == want.driver
        for device in slice_["devices"]
    }
    cards = []
    for free in device_ledger(cluster.slices, cluster.claims, want, schedulable_nodes(cluster.nodes)):
        if not free["shared"]:
            continue
        node, device = published[(free["pool"], free["name"])]
        key = (want.driver, free["pool"], free["name"])
        cards.append(CardState(
            key="/".join(key), node=node, device=free["name"], uuid=device.get("uuid", ""), free=free["free"],
            capacity=device["memory"], holders=tuple(holders.get(key, ())),
        ))  # fmt: skip
    return cards


def dra_competitor(device_class: str, want: DraWant) -> Callable[[str], bool]:
    """Whether a waiting pod's slot kind (:func:`.cluster.slots.dra_slot_kind`) may take the cards ``want`` may:
    the same device class, and the same product or any product."""
    if want.product is None:
        return lambda kind: kind.startswith(f"{device_class}.")
    return lambda kind: kind.startswith((f"{device_class}.{want.product}", f"{device_class}.any"))


def whole_card_waiting(
    pods: Iterable[Pod],
    competes: Callable[[str], bool] = lambda kind: True,
    *,
    claims: Iterable[Pod] = (),
    device_class: str | None = None,
    whole_resource: str | None = None,
) -> str | None:
    """What waits for whole cards, in words, or None: a server of whole GPUs not yet on a node (waiting in the
    queue or for the scheduler) whose slot kind ``competes`` for the same cards; with ``whole_resource``, another
    pod not yet on a node that asks for whole cards of it (:func:`asks_whole_cards`: a batch job's, a lent job's);
    with ``device_class``, an unallocated claim of a pod's asking for whole devices of that class
    (:func:`.cluster.devices.trim_viewed_claim`)."""
    pods = list(pods)
    found = _whole_card_start(pods, competes)
    if found is None and whole_resource is not None:
        batch = [pod for pod in pods if asks_whole_cards(pod, whole_resource)]
        found = f"a whole-card batch pod ({_named(batch[0])})" if batch else None
    if found is None and device_class is not None:
        waiting = [claim for claim in claims if device_class in (claim.get("waits_for") or ())]
        found = f"a whole-card batch claim ({_named(waiting[0])})" if waiting else None
    return found


def _named(obj: Pod) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def _unplaced(pod: Pod) -> bool:
    """Not on a node yet, and not being deleted."""
    return not (pod.get("spec") or {}).get("nodeName") and not (pod.get("metadata") or {}).get("deletionTimestamp")


def asks_whole_cards(pod: Pod, resource: str = WHOLE_GPU_RESOURCE) -> bool:
    """Whether a pod that is not fracnb's (no slot kind) and not yet on a node asks for whole cards of ``resource``:
    a container asks one or more of it, and (HAMi) none of a card's memory less than all of it."""
    metadata = pod.get("metadata") or {}
    if not _unplaced(pod) or SLOT_KIND_LABEL in (metadata.get("labels") or {}):
        return False
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        if HAMI_MEMORY_RESOURCE in asked or str(asked.get(HAMI_MEMORY_PERCENT_RESOURCE, "100")) != "100":
            continue  # a HAMi share: part of a card's memory
        amount = str(asked.get(resource, "0"))
        if amount.isdigit() and int(amount) > 0:
            return True
    return False


def _whole_card_start(pods: Iterable[Pod], competes: Callable[[str], bool]) -> str | None:
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if not _unplaced(pod):
            continue
        if not competes((metadata.get("labels") or {}).get(SLOT_KIND_LABEL, "")):
            continue
        try:
            fraction = Fraction(str((metadata.get("annotations") or {}).get(FRACTION_ANNOTATION, "0")))
        except (ValueError, ZeroDivisionError):
            continue
        if fraction >= 1 and fraction.denominator == 1:
            return f"a whole-card start ({metadata.get('name', '')})"
    return None
