"""The cluster as placement reads it: each DRA card a share could use with who holds it, and whether
something waits for whole cards. Pure; the cluster comes as the hub's watches keep it (:mod:`.cluster.slots`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import Any

from fracnb_spawner.cluster.devices import DraWant, device_ledger, schedulable_nodes
from fracnb_spawner.cluster.slots import Cluster
from fracnb_spawner.common.podkeys import FRACTION_ANNOTATION, SLOT_KIND_LABEL, USERNAME_ANNOTATION
from fracnb_spawner.placement.decide import CardState, Holder

Pod = Mapping[str, Any]


def _users_by_pod(pods: Iterable[Pod]) -> dict[tuple[str, str], str]:
    found = {}
    for pod in pods:
        metadata = pod.get("metadata") or {}
        user = (metadata.get("annotations") or {}).get(USERNAME_ANNOTATION)
        if user:
            found[(metadata.get("namespace", ""), metadata.get("name", ""))] = user
    return found


def dra_cards(cluster: Cluster, want: DraWant) -> list[CardState]:
    """The shareable cards ``want`` may use (driver, product, schedulable nodes matching its selector), with
    their free memory and holders. A holder whose pod the hub does not see is of an unknown user."""
    users = _users_by_pod(cluster.pods)
    holders: dict[tuple[str, str, str], list[Holder]] = {}
    for claim in cluster.claims:
        owner = claim.get("owner")
        user = users.get(tuple(owner), "") if owner else ""
        for result in claim["results"]:
            holders.setdefault(tuple(result["key"]), []).append(Holder(user))
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


def whole_card_waiting(pods: Iterable[Pod], competes: Callable[[str], bool] = lambda kind: True) -> str | None:
    """What waits for whole cards, in words, or None: a server of whole GPUs not yet on a node (waiting in the
    queue or for the scheduler) whose slot kind ``competes`` for the same cards."""
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if (pod.get("spec") or {}).get("nodeName") or metadata.get("deletionTimestamp"):
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
