"""The cluster as the reclaim rule reads it: DRA devices as cards, claims' pods as holders, the queue's
waiting notebooks as needs, PodDisruptionBudgets as budgets. Pure.

Slices and claims arrive trimmed as the hub's DRA view keeps them (:func:`.cluster.devices.trim_slice`,
:func:`.cluster.devices.trim_claim`); pods and PodDisruptionBudgets as the API returns them (dicts).
A claim whose pod the service cannot see (a claim made by hand, a pod already gone) is never a victim.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from fracnb_spawner.borrowing.queued import borrowable_selector
from fracnb_spawner.cluster.devices import DraWant, device_ledger
from fracnb_spawner.common.podkeys import SERVERNAME_ANNOTATION, USERNAME_ANNOTATION
from fracnb_spawner.culling import parse_timestamp
from fracnb_spawner.reclaim.victims import Budget, Card, Holder, Need, PodKey

Pod = Mapping[str, Any]
# Zero to JupyterHub's and KubeSpawner's label on every user server; with JupyterHub's annotations, a notebook.
COMPONENT_LABEL, SINGLEUSER = "component", "singleuser-server"
_LONG_AGO = datetime(1970, 1, 1, tzinfo=timezone.utc)


def pod_key(pod: Pod) -> PodKey:
    metadata = pod.get("metadata") or {}
    return metadata.get("namespace", ""), metadata.get("name", "")


def is_notebook(pod: Pod) -> bool:
    """A JupyterHub server (its username annotation or the singleuser component label): never evicted."""
    metadata = pod.get("metadata") or {}
    annotations, labels = metadata.get("annotations") or {}, metadata.get("labels") or {}
    return (
        USERNAME_ANNOTATION in annotations
        or SERVERNAME_ANNOTATION in annotations
        or labels.get(COMPONENT_LABEL) == SINGLEUSER
    )


def pod_priority(pod: Pod) -> int:
    """The pod's ``spec.priority`` (its PriorityClass's value, set by the apiserver); 0 without one."""
    priority = (pod.get("spec") or {}).get("priority")
    return priority if isinstance(priority, int) else 0


def _created(pod: Pod) -> datetime:
    try:
        return parse_timestamp((pod.get("metadata") or {}).get("creationTimestamp")) or _LONG_AGO
    except ValueError:
        return _LONG_AGO


def holder_of(pod: Pod | None, key: PodKey, amount: int) -> Holder:
    """The holder a claim's pod is; an unseen pod is held like a notebook (never evicted)."""
    if pod is None:
        return Holder(key, amount, 0, _LONG_AGO, notebook=True)
    leaving = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    return Holder(key, amount, pod_priority(pod), _created(pod), notebook=is_notebook(pod), leaving=leaving)


def card_key(driver: str, pool: str, device: str) -> str:
    return f"{driver}/{pool}/{device}"


def dra_cards(
    slices: Iterable[Mapping[str, Any]], claims: Iterable[Mapping[str, Any]], pods: Iterable[Pod]
) -> list[Card]:
    """Every DRA device of the slices, with the pods whose allocated claims hold it."""
    by_key = {pod_key(pod): pod for pod in pods}
    held: dict[str, list[Holder]] = {}
    for claim in claims:
        owner = claim.get("owner")
        key: PodKey = tuple(owner) if owner else (claim["metadata"]["namespace"], "claim/" + claim["metadata"]["name"])
        for result in claim["results"]:
            holder = holder_of(by_key.get(key) if owner else None, key, result["memory"])
            held.setdefault(card_key(*result["key"]), []).append(holder)
    cards = []
    for slice_ in slices:
        for device in slice_["devices"]:
            name = card_key(slice_["driver"], slice_["pool"], device["name"])
            holders = tuple(
                holder if holder.amount else replace(holder, amount=device["memory"]) for holder in held.get(name, [])
            )  # a claim of the whole device consumes no capacity: it holds all of it
            cards.append(Card(name, slice_["pool"], device["memory"], device["shared"], holders))
    return cards


def usable_cards(slices: Iterable[Mapping[str, Any]], want: DraWant, nodes: Iterable[Pod] | None) -> frozenset[str]:
    """The keys of the devices ``want`` may use: the hub's own matching (driver, type, product, profile, nodes)."""
    keys = set()
    for slice_ in slices:
        for device in device_ledger([slice_], [], want, nodes):
            keys.add(card_key(slice_["driver"], slice_["pool"], device["name"]))
    return frozenset(keys)


def need_of(want: DraWant, pod: Pod, usable: frozenset[str]) -> Need:
    """What a waiting notebook asks of the cards: a memory slice of one, or whole devices (a MIG device
    is a whole device of its kind)."""
    return Need(want.memory, want.count, pod_priority(pod), usable)


def wants_of(want: DraWant, pod: Pod) -> list[DraWant]:
    """A waiting notebook's wants in order of preference: its own pool's, then, when its pod may still borrow
    (``fracnb.io/borrowable``, :mod:`fracnb_spawner.borrowing.queued`), the same devices on the borrowable nodes."""
    selector = borrowable_selector(pod)
    if selector is None:
        return [want]
    return [want, replace(want, node_selector=tuple(sorted(selector.items())))]


def _expression_holds(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, values = expression.get("key", ""), expression.get("values") or []
    operator = expression.get("operator")
    if operator in ("In", "NotIn"):
        return (labels.get(key) in values) == (operator == "In")
    if operator in ("Exists", "DoesNotExist"):
        return (key in labels) == (operator == "Exists")
    return False


def _matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A label selector (matchLabels and matchExpressions) against ``labels``."""
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items()) and all(
        _expression_holds(expression, labels) for expression in selector.get("matchExpressions") or []
    )


def pdb_covers(pdb: Mapping[str, Any], pod: Pod) -> bool:
    """Whether the PodDisruptionBudget's selector matches ``pod`` in its namespace (no selector: none)."""
    selector = (pdb.get("spec") or {}).get("selector")
    namespace = (pdb.get("metadata") or {}).get("namespace", "")
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return selector is not None and pod_key(pod)[0] == namespace and _matches(selector, labels)


def budgets_of(pdbs: Iterable[Mapping[str, Any]], pods: Iterable[Pod]) -> list[Budget]:
    """Each PodDisruptionBudget as the pods it covers and the disruptions it allows now.

    A budget whose status the disruption controller has not written yet allows none, as the
    Eviction API then refuses too.
    """
    pods = list(pods)
    budgets = []
    for pdb in pdbs:
        if (pdb.get("spec") or {}).get("selector") is None:
            continue
        covered = frozenset(pod_key(pod) for pod in pods if pdb_covers(pdb, pod))
        allowed = (pdb.get("status") or {}).get("disruptionsAllowed", 0)
        budgets.append(Budget(covered, allowed if isinstance(allowed, int) else 0))
    return budgets
