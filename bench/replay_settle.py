"""Whether the replayed cluster has settled, and the small pure helpers of a step (bench/replay_day.py).

The day driver waits after each step until no start or job is still being acted on: every start is
running, refused, or waits for a slot (gated in fracnb's queue, or Pending with no room anywhere).
"No room" is the same arithmetic as the scheduler's fit: extended resources per node (the units of
pods a pod would preempt count as free), or on DRA clusters the claim's share against what the
allocated claims hold per card. It is only used to know when to stop waiting, never to place a pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from bench.replay_claims import claim_cards, fits_on, owner_pod, requested_share
from fracnb_spawner.cluster.nodes import requested_by_node
from fracnb_spawner.culling import isoformat

QUIET_FROM = 14 * 3600  # 21:00: nobody is at the desk any more (departures end by 20:30) ...
QUIET_STEP = 300  # ... so the night goes in 5-minute steps (or the day's, if longer)
QUEUE_GATE = "fracnb.io/queue"  # the queue's scheduling gate (docs/contract.md)
FRACTION_ANNOTATION = "fracnb.io/gpu-fraction"
QUEUED_AT_ANNOTATION = "fracnb.io/queued-at"  # when a queued spawn joined the queue (docs/contract.md)
GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared")


def _priority(pod: Mapping[str, Any]) -> int:
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) else 0


def gpu_request(pod: Mapping[str, Any]) -> tuple[str, int] | None:
    for container in pod.get("spec", {}).get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        for resource in GPU_RESOURCES:
            if resource in limits:
                return resource, int(str(limits[resource]))
    return None


def _matching_nodes(pod: Mapping[str, Any], nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    selector = pod.get("spec", {}).get("nodeSelector") or {}
    return [
        node
        for node in nodes
        if not (node.get("spec") or {}).get("unschedulable")
        and all((node["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
    ]


def fits_somewhere(pod: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> bool:
    """Whether some node matching the pod's selector has the GPUs it asks for free now, counting the
    GPUs of pods it would preempt (a lower priority) as free."""
    request = gpu_request(pod)
    if request is None:
        return True
    resource, amount = request
    mine = _priority(pod)
    used = requested_by_node([p for p in pods if _priority(p) >= mine], resource)
    for node in _matching_nodes(pod, nodes):
        allocatable = int(str(node["status"]["allocatable"].get(resource, 0)))
        if allocatable - used.get(node["metadata"]["name"], 0) >= amount:
            return True
    return False


@dataclass(frozen=True)
class Devices:
    """A DRA cluster's cards and their claims, for fit: which pod's claim asks how much, and what is held."""

    cards_of_node: Mapping[str, list[str]]
    card_bytes: int
    claims: list[dict[str, Any]]

    def fits(self, pod: Mapping[str, Any], nodes: list[dict[str, Any]]) -> bool | None:
        """Whether the pod's claim fits on a card of a matching node now; None while it has no claim."""
        name = pod["metadata"]["name"]
        claim = next((c for c in self.claims if owner_pod(c) == name), None)
        if claim is None:
            return None
        held: dict[str, Fraction] = {}
        for placed in claim_cards(self.claims, self.card_bytes).values():
            held[placed.card] = held.get(placed.card, Fraction(0)) + placed.share
        cards = [card for node in _matching_nodes(pod, nodes) for card in self.cards_of_node[node["metadata"]["name"]]]
        return fits_on(requested_share(claim, self.card_bytes), held, cards)


def _unbound(pod: Mapping[str, Any] | None) -> bool:
    return pod is not None and not pod.get("spec", {}).get("nodeName") and not pod["metadata"].get("deletionTimestamp")


def _no_room(
    pod: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]], devices: Devices | None
) -> bool:
    if devices is not None and pod.get("spec", {}).get("resourceClaims"):
        return devices.fits(pod, nodes) is False
    return not fits_somewhere(pod, nodes, pods)


def undecided(
    pod: dict[str, Any] | None, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], devices: Devices | None = None
) -> bool:
    """A pod the scheduler or KWOK has yet to act on (missing and deleted pods are undecided too)."""
    if pod is None or pod.get("metadata", {}).get("deletionTimestamp"):
        return True
    if pod.get("spec", {}).get("nodeName"):
        return pod.get("status", {}).get("phase") != "Running"
    return not _no_room(pod, nodes, pods, devices)


def waits_for_a_slot(
    pod: dict[str, Any] | None, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], devices: Devices | None = None
) -> bool:
    """A start's pod that waits: held in the hub's queue (its scheduling gate, docs/contract.md),
    or Pending and unbound with no node that has room for it now."""
    if not _unbound(pod):
        return False
    assert pod is not None
    gates = pod.get("spec", {}).get("schedulingGates") or []
    if any(gate.get("name") == QUEUE_GATE for gate in gates):
        return True  # the hub lifts the gate in its own time; the next step sees it
    return _no_room(pod, nodes, pods, devices)


def on_virtual_clock(pods: list[dict[str, Any]], queued_at: Mapping[str, datetime]) -> list[dict[str, Any]]:
    """The pods with each queued spawn's ``fracnb.io/queued-at`` on the virtual clock. The hub writes the
    real time; the culler compares it with the virtual now (demand for a slot kind starts then)."""
    moved = []
    for pod in pods:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        moment = queued_at.get(pod["metadata"]["name"])
        if QUEUED_AT_ANNOTATION not in annotations or moment is None:
            moved.append(pod)
            continue
        annotations = {**annotations, QUEUED_AT_ANNOTATION: isoformat(moment)}
        moved.append({**pod, "metadata": {**pod["metadata"], "annotations": annotations}})
    return moved


def asked_share(pod: Mapping[str, Any]) -> Fraction:
    """The share of a card a notebook pod asks for: fracnb's annotation, else a whole GPU."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(FRACTION_ANNOTATION)
    return Fraction(text) if text else Fraction(1)


def step_moments(length: int, step: int, quiet_from: int = QUIET_FROM, quiet_step: int = QUIET_STEP) -> list[int]:
    """The moments the clock stops at: every ``step`` seconds, and at night every ``quiet_step`` seconds
    (servers left running, long cells, culls and training jobs change slowly; nobody starts a server)."""
    moments = list(range(0, min(quiet_from, length), step))
    night = max(step, quiet_step)
    start = moments[-1] + step if moments else 0
    return moments + list(range(start, length, night))
