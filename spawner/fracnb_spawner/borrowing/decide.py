"""Borrowing a card of another pool (docs/lending.md, "Borrowing a training card"). Pure.

An admin marks the nodes whose idle cards a waiting notebook may borrow (``c.FractionalSpawner.
borrowable_node_selector``), typically the training pool. A GPU start that would wait in the hub's queue because
its own pool has no room starts on a borrowable node instead, when one has room for its share now: its pod's node
selector is swapped for the borrowable one (:func:`borrowed_pod`). It keeps notebook priority there, and it never
preempts: its ask counts every pod's GPUs as used (:func:`without_preemption`), so a batch pod's card is never
taken for it except by the fracnb service's reclaim rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client.models import V1Toleration

from fracnb_spawner.cluster.nodes import free_by_node
from fracnb_spawner.cluster.slots import Ask, Cluster, ResourceAsk, UnitLedger
from fracnb_spawner.common.labels import key_problem, value_problem
from fracnb_spawner.common.podkeys import BORROWED_FROM_ANNOTATION, BORROWED_LABEL, SLOT_KIND_LABEL

TOLERATION_KEYS = {"key": "key", "operator": "operator", "value": "value", "effect": "effect",
                   "tolerationSeconds": "toleration_seconds"}  # fmt: skip
OPERATORS = ("Exists", "Equal")
EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class BorrowSettings:
    """The admin's borrowable pool: its nodes' labels (empty: no borrowing) and the tolerations its taints need."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.node_selector)


@dataclass(frozen=True)
class Borrow:
    """Where one spawn may start if its own pool is full: the borrowable pool's ask, and the pod's node selector and
    tolerations there."""

    ask: Ask
    own_kind: str  # the slot kind of the spawn's own pool
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class StrictResourceAsk(ResourceAsk):
    """A device-plugin ask that takes only free units: the units of pods below notebook priority count as used, so
    the hub never sends a borrower where kube-scheduler would preempt a batch pod for it."""

    def ledger(self, cluster: Cluster) -> UnitLedger:
        free = free_by_node(cluster.nodes, cluster.pods, self.resource, self.selector, preempting=False)
        return UnitLedger(list(free))


def without_preemption(ask: Ask) -> Ask:
    """``ask`` counting only free capacity. A DRA ask already does: the queue counts a device any claim holds as
    taken (kube-scheduler does not preempt for claims)."""
    if isinstance(ask, ResourceAsk) and not isinstance(ask, StrictResourceAsk):
        return StrictResourceAsk(**{name: getattr(ask, name) for name in ask.__dataclass_fields__})
    return ask


def borrow_for(
    own: Ask | None, borrowed: Ask | None, settings: BorrowSettings, backend_selector: Mapping[str, str]
) -> Borrow | None:
    """The borrowing option of a spawn whose own ask is ``own``; ``borrowed``: the same plan's ask with the
    borrowable node selector (``cluster.slots.ask_for``). None without borrowing, for a spawn that never queues,
    and where the borrowable pool is the spawn's own (the same slot kind)."""
    if not settings.enabled or own is None or borrowed is None or borrowed.kind == own.kind:
        return None
    selector = {**settings.node_selector, **backend_selector}
    return Borrow(without_preemption(borrowed), own.kind, selector, tuple(settings.tolerations))


def borrowed_pod(pod: Any, borrow: Borrow) -> None:
    """Send KubeSpawner's V1Pod ``pod`` to the borrowable pool (changed in place): its node selector swapped, the
    pool's tolerations added, its slot kind the pool's, and ``fracnb.io/borrowed`` saying it borrows."""
    pod.spec.node_selector = dict(borrow.node_selector)
    tolerations = [V1Toleration(**{TOLERATION_KEYS[k]: v for k, v in t.items()}) for t in borrow.tolerations]
    if tolerations:
        pod.spec.tolerations = [*(pod.spec.tolerations or []), *tolerations]
    pod.metadata.labels = {**(pod.metadata.labels or {}), SLOT_KIND_LABEL: borrow.ask.kind, BORROWED_LABEL: "true"}
    pod.metadata.annotations = {**(pod.metadata.annotations or {}), BORROWED_FROM_ANNOTATION: borrow.own_kind}


# ---- the configuration ------------------------------------------------------------------------------


def check_selector(value: object) -> dict[str, str]:
    """A borrowable node selector: label keys to label values. ``ValueError`` says what is wrong."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{value!r} is not a mapping of node label keys to values, e.g. {{'pool': 'training'}}")
    for key, item in value.items():
        problem = key_problem(key) or value_problem(item)
        if problem:
            raise ValueError(f"{key!r}: {problem}")
    return dict(value)


def check_tolerations(value: object) -> list[dict[str, Any]]:
    """Tolerations as the pod spec writes them (``key``, ``operator``, ``value``, ``effect``,
    ``tolerationSeconds``). ``ValueError`` says what is wrong."""
    if not isinstance(value, list | tuple):
        raise ValueError(f"{value!r} is not a list of tolerations")
    checked = []
    for index, item in enumerate(value):
        where = f"toleration {index}"
        if not isinstance(item, Mapping) or not item:
            raise ValueError(f"{where}: {item!r} is not a toleration such as {{'key': 'pool', 'operator': 'Exists'}}")
        unknown = sorted(set(item) - set(TOLERATION_KEYS))
        if unknown:
            raise ValueError(f"{where}: unknown keys {unknown}; a toleration has {sorted(TOLERATION_KEYS)}")
        if item.get("operator", "Equal") not in OPERATORS:
            raise ValueError(f"{where}: operator {item['operator']!r} is not one of {list(OPERATORS)}")
        if item.get("effect", "") not in EFFECTS:
            raise ValueError(f"{where}: effect {item['effect']!r} is not one of {list(EFFECTS)}")
        seconds = item.get("tolerationSeconds")
        if seconds is not None and (not isinstance(seconds, int) or isinstance(seconds, bool)):
            raise ValueError(f"{where}: tolerationSeconds {seconds!r} is not a whole number of seconds")
        checked.append(dict(item))
    return checked
