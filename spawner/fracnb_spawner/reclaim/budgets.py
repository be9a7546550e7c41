"""PodDisruptionBudgets that allow reclaim no eviction, and why. Pure.

Kubernetes' disruption controller writes a budget's ``status.disruptionsAllowed``. An integer
``minAvailable`` it counts against the pods the selector matches. ``maxUnavailable`` and a percentage
``minAvailable`` need the number of pods the pods' controller wants, read from its ``scale``
subresource (ReplicaSet, ReplicationController, StatefulSet, a custom resource with one): a Job and a
DaemonSet have none, so the controller fails to sync such a budget ("jobs.batch does not implement the
scale subresource"), marks it ``DisruptionAllowed=False``, reason ``SyncFailed``, and it allows no
eviction, ever; over bare pods (no controller) it counts no pods and allows none either. Kubernetes'
docs, "Arbitrary workloads and arbitrary selectors": for such pods only an integer ``minAvailable``.

The reclaim pass honours ``disruptionsAllowed`` (:func:`.reclaim.cluster.budgets_of`); these rules only
say why a budget over a batch pod holds it for good, so that the admin hears it once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fracnb_spawner.reclaim.cluster import pdb_covers, pod_key
from fracnb_spawner.reclaim.victims import Card, Need, PodKey, Policy, reclaimable

Pod = Mapping[str, Any]
# Built-in controllers of pods without a scale subresource: a budget needing one fails to sync over their pods.
NO_SCALE = frozenset({("batch", "Job"), ("apps", "DaemonSet")})
SYNC_FAILED = "SyncFailed"  # the disruption controller's reason on the DisruptionAllowed condition
FIX = "give it an integer minAvailable below the number of pods it covers, or no budget (docs/lending.md)"


def controller_of(pod: Pod) -> tuple[str, str, str] | None:
    """The (API group, kind, name) of the pod's controlling owner; None for a bare pod."""
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller"):
            group = str(owner.get("apiVersion", "")).rpartition("/")[0]
            return group, str(owner.get("kind", "")), str(owner.get("name", ""))
    return None


def scaled_shape(pdb: Mapping[str, Any]) -> str | None:
    """How the budget is said when it needs its pods' controller's scale: "maxUnavailable 1",
    "minAvailable 50%"; None for an integer minAvailable."""
    spec = pdb.get("spec") or {}
    if spec.get("maxUnavailable") is not None:
        return f"maxUnavailable {spec['maxUnavailable']}"
    if isinstance(spec.get("minAvailable"), str):
        return f"minAvailable {spec['minAvailable']}"
    return None


def sync_failure(pdb: Mapping[str, Any]) -> str | None:
    """The disruption controller's message when it could not sync the budget (its SyncFailed condition)."""
    for condition in (pdb.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "DisruptionAllowed" and condition.get("reason") == SYNC_FAILED:
            return str(condition.get("message") or "no message")
    return None


def _ready(pod: Pod) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _shape_reason(shape: str, covered: Sequence[Pod]) -> str | None:
    controllers = [controller_of(pod) for pod in covered]
    unscaled = next((c for c in controllers if c is not None and (c[0], c[1]) in NO_SCALE), None)
    if unscaled is not None:
        return (
            f"its {shape} needs the scale subresource of the pods' controller, and {unscaled[1]} {unscaled[2]} has"
            " none: the disruption controller cannot sync it and disruptionsAllowed stays 0"
        )
    if controllers and all(c is None for c in controllers):
        return (
            f"its {shape} needs the pods' controller's scale, and its pods have no controller:"
            " the disruption controller counts none of them and disruptionsAllowed stays 0"
        )
    return None


def blocking_reason(pdb: Mapping[str, Any], covered: Sequence[Pod]) -> str | None:
    """Why the budget over ``covered`` (the pods its selector matches) allows no eviction; None when it may.

    In order: a shape the pods' controller cannot serve (maxUnavailable or a percentage over a Job's,
    a DaemonSet's or bare pods); the disruption controller's sync failure; an integer minAvailable that
    keeps every ready pod it covers.
    """
    shape = scaled_shape(pdb)
    reason = _shape_reason(shape, covered) if shape else None
    failure = sync_failure(pdb)
    if reason is None and failure is not None:
        reason = f"the disruption controller cannot sync it ({failure}), so disruptionsAllowed stays 0"
    minimum = (pdb.get("spec") or {}).get("minAvailable")
    ready = sum(1 for pod in covered if _ready(pod))
    if reason is None and isinstance(minimum, int) and 0 < ready <= minimum:
        reason = f"its minAvailable {minimum} keeps all {ready} ready pods it covers"
    return None if reason is None else f"{reason}; {FIX}"


def budget_name(pdb: Mapping[str, Any]) -> PodKey:
    metadata = pdb.get("metadata") or {}
    return metadata.get("namespace", ""), metadata.get("name", "")


def blocking_budgets(
    pdbs: Iterable[Mapping[str, Any]], pods: Sequence[Pod], over: frozenset[PodKey] | None = None
) -> list[tuple[PodKey, str]]:
    """(budget, reason) for each budget allowing no eviction of its pods; with ``over``, only budgets
    covering one of those pods (the reclaim candidates)."""
    found = []
    namespaces = None if over is None else {namespace for namespace, _name in over}
    for pdb in pdbs:
        if namespaces is not None and budget_name(pdb)[0] not in namespaces:
            continue  # no candidate there: not worth matching every pod of the cluster
        covered = [pod for pod in pods if pdb_covers(pdb, pod)]
        if over is not None and not {pod_key(pod) for pod in covered} & over:
            continue
        reason = blocking_reason(pdb, covered)
        if reason is not None:
            found.append((budget_name(pdb), reason))
    return found


def reclaim_candidates(cards: Iterable[Card], policy: Policy) -> frozenset[PodKey]:
    """The pods holding cards that the policy would evict for a notebook of its priority limit."""
    need = Need(None, priority=policy.priority_below)
    return frozenset(holder.pod for card in cards for holder in card.holders if reclaimable(holder, need, policy))


def warning_text(budget: PodKey, reason: str) -> str:
    namespace, name = budget
    return f"PodDisruptionBudget {namespace}/{name} allows reclaim no eviction of its pods: {reason}"


# The workloads whose pods a manifest's budgets may cover: (API group, kind) -> how many pods it runs.
_WORKLOADS = {
    ("batch", "Job"): lambda spec: spec.get("parallelism", 1),
    ("apps", "DaemonSet"): lambda spec: 1,
    ("apps", "ReplicaSet"): lambda spec: spec.get("replicas", 1),
    ("apps", "StatefulSet"): lambda spec: spec.get("replicas", 1),
    ("", "ReplicationController"): lambda spec: spec.get("replicas", 1),
}


def pods_of_manifests(objects: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The pods the manifests' workloads would run, as their controllers make them (template labels, the
    controller as owner, ready): bare Pods as they are; a Deployment's through a ReplicaSet."""
    pods: list[dict[str, Any]] = []
    for obj in objects:
        group = str(obj.get("apiVersion", "")).rpartition("/")[0]
        kind, metadata, spec = obj.get("kind"), obj.get("metadata") or {}, obj.get("spec") or {}
        namespace = metadata.get("namespace", "")
        ready = {"conditions": [{"type": "Ready", "status": "True"}]}
        if kind == "Pod":
            pods.append({**obj, "metadata": {**metadata, "namespace": namespace}, "status": ready})
            continue
        owner_kind = "ReplicaSet" if (group, kind) == ("apps", "Deployment") else kind
        count = _WORKLOADS.get((group, owner_kind))
        if count is None:
            continue
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        owner = {
            "apiVersion": obj.get("apiVersion"),
            "kind": owner_kind,
            "name": metadata.get("name"),
            "controller": True,
        }
        for index in range(max(int(count(spec) or 0), 1)):
            name = f"{metadata.get('name')}-{index}"
            pod_meta = {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": [owner]}
            pods.append({"metadata": pod_meta, "status": ready})
    return pods


def manifest_warnings(objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """The warnings for the budgets of a file of Kubernetes objects over the pods its workloads would run."""
    pdbs = [obj for obj in objects if obj.get("kind") == "PodDisruptionBudget"]
    return [warning_text(*found) for found in blocking_budgets(pdbs, pods_of_manifests(objects))]
