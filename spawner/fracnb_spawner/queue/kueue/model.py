"""The queue on Kueue (``c.FracnbQueue.engine = "kueue"``): pure pieces, no I/O.

With this engine a GPU pod is admitted by Kueue, not by fracnb's coordinator: the spawner labels it with
the user's LocalQueue and a WorkloadPriorityClass, Kueue gates it (``kueue.x-k8s.io/admission``) until
the team's ClusterQueue has quota, and the hub turns Kueue's Workload status and the visibility API's
positions into the words of the progress page and of the stop records. Quotas are counted by Kueue in
the integer logical resource ``fracnb.io/gpu-milli`` (helm-values/kueue/manager-config.yaml turns a GPU
slot into it), hence the milli-GPU arithmetic here. docs/queue.md "Engines" says what this does not do.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any
from zoneinfo import ZoneInfo

from fracnb_spawner.common.clock import clock_text
from fracnb_spawner.common.podkeys import (
    CHOICE_ANNOTATION,
    FRACTION_ANNOTATION,
    KUEUE_ADMISSION_GATE,
    KUEUE_QUEUE_LABEL,
    PROFILE_ANNOTATION,
    SERVERNAME_ANNOTATION,
    USERNAME_ANNOTATION,
)
from fracnb_spawner.common.units import QuantityError, format_gpus, gpus_text
from fracnb_spawner.queue.order import parse_time

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"  # Kueue's API, as v0.17 serves it
QUEUE_NAME_LABEL = KUEUE_QUEUE_LABEL
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
MANAGED_FINALIZER = "kueue.x-k8s.io/managed"  # Kueue's webhook puts it on each pod it manages
MILLI_RESOURCE = "fracnb.io/gpu-milli"
PRIORITY_CLASS_PREFIX = "fracnb-notebook"
OWNER_ANNOTATION = "fracnb.io/hub-user"  # on a LocalQueue: the one hub user whose queue it is
# The name of the variable that holds the server's token in its pod's environment (Spawner.get_env).
API_TOKEN_ENV = "JUPYTERHUB_API_TOKEN"  # noqa: S105 - a name, not a secret
# Backends whose GPU ask is no countable resource request for Kueue v0.17: a DRA claim (not counted
# without the alpha DynamicResourceAllocation gate, and refused with CEL selectors when it is on) and
# KAI's gpu-fraction annotation (KAI has queues of its own).
UNCOUNTABLE_BACKENDS = {
    "dra": "Kueue v0.17 cannot count DRA claims (their CEL selectors and capacity requests are refused or "
    "ignored); use a device-plugin backend (time-slicing, mps, whole GPUs; mig with a transformation of its "
    "resource, docs/queue.md) with this engine",
    "hami": "a HAMi share asks for a whole nvidia.com/gpu (Kueue would charge 1 GPU for 0.25) and for "
    "nvidia.com/gpucores and gpumem, which no ClusterQueue covers; use time-slicing or mps with this engine, "
    "or engine 'builtin'",
    "kai": "KAI's GPU fractions are an annotation Kueue does not see; KAI has queues of its own, so use "
    "engine 'builtin' or a device-plugin backend",
}
_HUMAN_PREEMPTION = {
    "InClusterQueue": "a higher-priority job of {team}",
    "InCohortReclamation": "{team} taking back its own quota",
    "InCohortReclaimWhileBorrowing": "{team} taking back quota",
    "InCohortFairSharing": "fair sharing with {team}",
}
_PREEMPTOR_PATH = re.compile(r"preemptor path: (\S+?);")
# Kueue's words for each preemption reason in its messages (HumanReadablePreemptionReasons, preemption.go, v0.17.0).
_PREEMPTION_BY_WORDS = {
    "prioritization in the ClusterQueue": "InClusterQueue",
    "reclamation within the cohort": "InCohortReclamation",
    "Fair Sharing within the cohort": "InCohortFairSharing",
    "reclamation within the cohort while borrowing": "InCohortReclaimWhileBorrowing",
}
_DUE_TO = re.compile(r" due to (.+?); preemptor path:")
STOPPED_BY_KUEUE = "kueue"  # the reason of the hub's stop notice after Kueue stopped a server
TERMINATION_TARGET = "TerminationTarget"  # the pod condition Kueue sets just before it deletes a pod it evicts
_MORE_NEEDED = re.compile(r"insufficient unused quota for (\S+) in flavor \S+, (\d+) more needed")


class KueueConfigError(ValueError):
    """A profile cannot work with the Kueue engine."""


def priority_class_name(priority: int) -> str:
    """The WorkloadPriorityClass of fracnb's queue priority: ``fracnb-notebook`` for 0, else
    ``fracnb-notebook-<p>`` (``-minus-<p>`` below 0); helm-values/kueue/queues.yaml creates the first."""
    if priority == 0:
        return PRIORITY_CLASS_PREFIX
    return f"{PRIORITY_CLASS_PREFIX}-{priority}" if priority > 0 else f"{PRIORITY_CLASS_PREFIX}-minus-{-priority}"


def pod_labels(local_queue: str, priority: int) -> dict[str, str]:
    """The labels that put a GPU pod in Kueue's hands."""
    return {QUEUE_NAME_LABEL: local_queue, PRIORITY_CLASS_LABEL: priority_class_name(priority)}


# A stopping server's work after its save: the session's last report, then its kernels' shutdown.
AFTER_SAVE_SECONDS = 15
STOP_HIBERNATION_VARIABLE = "FRACNB_STOP_HIBERNATION_TIMEOUT"
# A preempted notebook saves in its grace period, after the hub's last look at it: the hub cannot say what it saved.
SAVING_AT_STOP = (
    "its idle notebooks were saving their variables as it stopped: open a notebook again to restore what was saved"
)


def termination_grace(current: int | None, hibernation_timeout: float) -> int:
    """A pod's terminationGracePeriodSeconds: the hibernation timeout and the work after the save at least,
    since a preempted pod is deleted and its grace period is the only time it has to save its variables."""
    if hibernation_timeout <= 0:
        return int(current or 30)
    return max(int(current or 30), int(-(-hibernation_timeout // 1)) + AFTER_SAVE_SECONDS)


def stop_hibernation_env(hibernation_timeout: float) -> dict[str, str]:
    """The variable that has the notebook save its idle kernels' variables when its pod is deleted (the
    meter's stop: fracnb_meter.contract.stop_hibernation_timeout); none when hibernation is off."""
    if hibernation_timeout <= 0:
        return {}
    return {STOP_HIBERNATION_VARIABLE: str(int(-(-hibernation_timeout // 1)))}


def check_backend(backend: str, where: str) -> None:
    """Refuse a choice whose backend Kueue cannot count, naming it."""
    reason = UNCOUNTABLE_BACKENDS.get(backend)
    if reason:
        raise KueueConfigError(f"{where}: backend {backend!r} cannot run with c.FracnbQueue.engine = 'kueue': {reason}")


def missing_local_queue_text(local_queue: str, namespace: str) -> str:
    """The progress page's words for a spawn whose user has no LocalQueue: Kueue will never admit it."""
    return (
        f"Waiting in the GPU queue: Kueue has no LocalQueue {local_queue} in {namespace} for you, so it cannot "
        "admit this server; ask your hub's admin to create it (helm-values/kueue/queues.yaml)."
    )


def not_own_queue_text(local_queue: Mapping[str, Any] | None, user: str, name: str, namespace: str) -> str | None:
    """Why a GPU spawn of ``user`` is refused before its pod exists, given their LocalQueue ``name`` as the
    apiserver holds it (None: there is none); None when it is theirs. The rule (docs/queue.md "Per-user
    LocalQueues"): it must exist, and if it carries the annotation ``fracnb.io/hub-user`` that must be ``user``
    exactly. The name is the user's alone (:func:`local_queue_name` is one for one); the annotation guards
    against a queue an admin named for someone else, e.g. by fracnb's earlier rule, which folded "carol.smith"
    and "carol-smith" together."""
    if local_queue is None:
        return (
            f"No GPU server was started: Kueue has no LocalQueue {name} in {namespace}, the GPU queue of hub user "
            f"{user!r}, so it could never admit one. Ask your hub's admin to create it, pointing to your team's "
            f"ClusterQueue and annotated {OWNER_ANNOTATION}: {user} (docs/queue.md); CPU-only servers still start."
        )
    owner = ((local_queue.get("metadata") or {}).get("annotations") or {}).get(OWNER_ANNOTATION)
    if owner is None or owner == user:
        return None
    return (
        f"No GPU server was started: the LocalQueue {name} in {namespace} has your queue's name but belongs to hub "
        f"user {owner!r} (annotation {OWNER_ANNOTATION}), so its quota is not yours. Ask your hub's admin to move "
        f"that user to a LocalQueue of their own name (fracnb-dry-run --kueue-queue-of) and to create yours, {name}, "
        f"annotated {OWNER_ANNOTATION}: {user} (docs/queue.md)."
    )


def is_waiting_for_kueue(pod: Mapping[str, Any] | None) -> bool:
    """Whether the pod carries Kueue's admission gate."""
    gates = ((pod or {}).get("spec") or {}).get("schedulingGates") or []
    return any(gate.get("name") == KUEUE_ADMISSION_GATE for gate in gates)


def _request_of(pod: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a spawn asked for, as its pod shows it: the profile, choice and fraction, and the notebook's image
    (not its resources: the apiserver writes quantities in its own canonical form)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    notebook = ((pod.get("spec") or {}).get("containers") or [{}])[0]
    keys = (PROFILE_ANNOTATION, CHOICE_ANNOTATION, FRACTION_ANNOTATION)
    return (*(annotations.get(key) for key in keys), notebook.get("image"))


def kept_server_token(
    pod: Mapping[str, Any] | None, user: str, server: str, wanted: Mapping[str, Any] | None = None
) -> str | None:
    """The API token of a pod a resumed spawn of ``user``'s ``server`` takes over rather than replaces: one that
    still waits for Kueue, is not being deleted, belongs to that server (KubeSpawner's annotations) and asks for
    what the spawn asks (``wanted``, its pod: the user may have picked another choice since); else None. A
    replacement would be a new Workload at the back of Kueue's queue; the kept pod keeps its Workload and its
    place, and its server keeps the token it was created with (JupyterHub registers a token a spawner reuses)."""
    metadata = (pod or {}).get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if not is_waiting_for_kueue(pod) or metadata.get("deletionTimestamp"):
        return None
    if wanted is not None and _request_of(pod or {}) != _request_of(wanted):
        return None
    if (annotations.get(USERNAME_ANNOTATION), annotations.get(SERVERNAME_ANNOTATION, "")) != (user, server):
        return None
    for container in ((pod or {}).get("spec") or {}).get("containers") or []:
        for variable in container.get("env") or []:
            if variable.get("name") == API_TOKEN_ENV and variable.get("value"):
                return str(variable["value"])
    return None


def stuck_finalizer_patch(pod: Mapping[str, Any] | None, now: datetime, timeout: float) -> list[dict] | None:
    """The JSON patch that takes Kueue's finalizer off a pod whose deletion it has held ``timeout`` seconds past
    the pod's grace period (``metadata.deletionTimestamp``: Kueue removes it at once when it runs, so it is
    down); None while it may still come. The ``test`` makes the patch fail rather than remove another entry."""
    metadata = (pod or {}).get("metadata") or {}
    finalizers = metadata.get("finalizers") or []
    deleting = parse_time(metadata.get("deletionTimestamp"))
    if MANAGED_FINALIZER not in finalizers or deleting is None or now < deleting + timedelta(seconds=timeout):
        return None
    path = f"/metadata/finalizers/{finalizers.index(MANAGED_FINALIZER)}"
    return [{"op": "test", "path": path, "value": MANAGED_FINALIZER}, {"op": "remove", "path": path}]


def condition(workload: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    for entry in ((workload or {}).get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return entry
    return None


def milli_to_gpus(milli: int | str) -> str:
    return format_gpus(Fraction(int(milli), 1000))


@dataclass(frozen=True)
class Borrowing:
    """A ClusterQueue of the cohort using more than its nominal quota of GPUs."""

    team: str
    milli: int


def borrowers(cluster_queues: Iterable[Mapping[str, Any]], own: str) -> list[Borrowing]:
    """The other ClusterQueues borrowing ``fracnb.io/gpu-milli`` (``status.flavorsUsage[].resources[].borrowed``)."""
    found = []
    for queue in cluster_queues:
        name = queue["metadata"]["name"]
        if name == own:
            continue
        milli = sum(
            milli_quantity(resource.get("borrowed", 0))
            for flavor in (queue.get("status") or {}).get("flavorsUsage") or []
            for resource in flavor.get("resources") or []
            if resource.get("name") == MILLI_RESOURCE
        )
        if milli > 0:
            found.append(Borrowing(name, milli))
    return sorted(found, key=lambda b: (-b.milli, b.team))


def waiting_reason(workload: Mapping[str, Any] | None, team: str, others: Iterable[Borrowing] = ()) -> str:
    """Why Kueue has not admitted the pod yet, in words: "waiting for 0.25 GPU of team-a's quota; team-b is
    borrowing 0.5". Unknown messages are passed on as Kueue wrote them."""
    reserved = condition(workload, "QuotaReserved")
    if reserved is None:
        return "waiting for Kueue to look at this request"
    if reserved.get("status") == "True":
        return "admitted by Kueue; starting"
    message = str(reserved.get("message") or reserved.get("reason") or "")
    match = _MORE_NEEDED.search(message)
    if match is None:
        return f"waiting for Kueue: {message}" if message else "waiting for Kueue"
    resource, more = match.groups()
    amount = gpus_text(Fraction(int(more), 1000)) if resource == MILLI_RESOURCE else f"{more} {resource}"
    words = f"waiting for {amount} of {team}'s quota"
    lending = [f"{b.team} is borrowing {milli_to_gpus(b.milli)}" for b in others]
    return "; ".join([words, *lending])


def position_in_cluster_queue(pending_workloads: Any, workload_name: str) -> int | None:
    """The workload's ``positionInClusterQueue`` in the visibility API's answer (a PendingWorkloadsSummary); None
    when it is not listed. Raises KeyError, TypeError, ValueError or AttributeError on an answer of the wrong shape."""
    for item in (pending_workloads or {}).get("items") or []:
        if item["metadata"]["name"] == workload_name:
            return int(item.get("positionInClusterQueue", 0))
    return None


def place_words(position_in_cluster_queue: int | None) -> str:
    """The visibility API's 0-based position in the team's ClusterQueue, in words."""
    if position_in_cluster_queue is None:
        return "in the queue"
    if position_in_cluster_queue == 0:
        return "next in line"
    ahead = position_in_cluster_queue
    return f"{ahead} ahead of you" if ahead > 1 else "1 ahead of you"


def saves_at_stop(pod: Mapping[str, Any] | None) -> bool:
    """Whether the notebook of ``pod`` saves its idle kernels' variables when deleted (:func:`stop_hibernation_env`)."""
    containers = ((pod or {}).get("spec") or {}).get("containers") or [{}]
    values = [
        v.get("value") or "" for v in containers[0].get("env") or [] if v.get("name") == STOP_HIBERNATION_VARIABLE
    ]
    return any(value.isdigit() and int(value) > 0 for value in values)


def stop_reason(
    workload: Mapping[str, Any] | None,
    saved_variables: int | None,
    *,
    saving: bool = False,
    notebooks: Sequence[str] = (),
) -> str | None:
    """Why Kueue stopped a running pod (Evicted/Preempted), in words, with what hibernation saved:
    "preempted by a higher-priority job of team-b; 41 variables of train.ipynb saved" (``notebooks``: those whose
    variables were saved; ``saving``: the count is not known, but the notebook was saving as it stopped). None if
    Kueue did not stop it."""
    evicted = condition(workload, "Evicted")
    if evicted is None or evicted.get("status") != "True":
        return None
    preempted = condition(workload, "Preempted")
    if preempted is not None and preempted.get("status") == "True":
        path = _PREEMPTOR_PATH.search(str(preempted.get("message") or ""))
        team = path.group(1).rstrip("/").rsplit("/", 1)[-1] if path else "another team"
        who = _HUMAN_PREEMPTION.get(str(preempted.get("reason")), "a higher-priority job of {team}")
        words = f"preempted by {who.format(team=team)}"
    else:
        words = f"stopped by Kueue ({evicted.get('reason')}: {evicted.get('message')})"
    if saved_variables is None:
        return f"{words}; {SAVING_AT_STOP if saving else 'nothing was saved'}"
    if saved_variables == 0:  # no kernel held any (or none ran)
        return f"{words}; no variables to save"
    of = f" of {names_text(notebooks)}" if notebooks else ""
    return f"{words}; {saved_variables} variable{'s' if saved_variables != 1 else ''}{of} saved"


def names_text(names: Sequence[str]) -> str:
    """ "a.ipynb", "a.ipynb and b.ipynb", "a.ipynb, b.ipynb and c.ipynb"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def pod_stop_reason(
    pod: Mapping[str, Any] | None, saved_variables: int | None, notebooks: Sequence[str] = ()
) -> str | None:
    """Why Kueue is deleting a running pod, in words (as :func:`stop_reason`), from the pod's own condition
    ``TerminationTarget`` (reason ``WorkloadEvictedDueTo<reason>``, message the Workload's eviction message), which
    outlives the Workload the garbage collector removes with the pod. None if Kueue did not stop it."""
    target = termination_target(pod)
    if target is None:
        return None
    reason, message = str(target.get("reason") or ""), str(target.get("message") or "")
    evicted = {"type": "Evicted", "status": "True", "reason": reason.removeprefix("WorkloadEvictedDueTo")}
    evicted["message"] = message
    found = [evicted]
    due_to = _DUE_TO.search(message)
    if reason.endswith("Preempted") and due_to:
        kind = _PREEMPTION_BY_WORDS.get(due_to.group(1), "InClusterQueue")
        found.append({"type": "Preempted", "status": "True", "reason": kind, "message": message})
    conditions = {"status": {"conditions": found}}
    return stop_reason(conditions, saved_variables, saving=saves_at_stop(pod), notebooks=notebooks)


def termination_target(pod: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The condition ``TerminationTarget`` Kueue sets on a pod it is deleting; None on any other pod."""
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == TERMINATION_TARGET and c.get("status") == "True"), None)


def terminated_at(pod: Mapping[str, Any] | None) -> datetime | None:
    """When Kueue marked ``pod`` for deletion (its ``TerminationTarget`` condition); None if it did not."""
    target = termination_target(pod)
    return parse_time(target.get("lastTransitionTime")) if target is not None else None


def stop_message(words: str, at: datetime, zone: ZoneInfo | None = None, server: str = "") -> str:
    """The notice after Kueue stopped ``server`` (``words``: :func:`pod_stop_reason`), named as the other stop
    notices name it (history.stopnotices.notice_headline); the hub's pages and the server's open tabs say it."""
    which = f"Your server {server!r}" if server else "Your server"
    return (
        f"{which} stopped at {clock_text(at, zone)}, {words}. Files in your home are kept; starting it again waits "
        "in Kueue's queue for a GPU."
    )


def _asks_for_quota(workload: Mapping[str, Any]) -> bool:
    """Not admitted yet, and neither deactivated (an admin's hold, a back-off) nor finished."""
    if (workload.get("spec") or {}).get("active") is False:
        return False
    return not any(
        (found := condition(workload, kind)) is not None and found.get("status") == "True"
        for kind in ("QuotaReserved", "Finished")
    )


def pending_milli(workloads: Iterable[Mapping[str, Any]]) -> int:
    """GPU demand of Workloads waiting for quota (no QuotaReserved=True; neither deactivated nor finished),
    from ``status.resourceRequests``, for demand-aware culling across a cohort."""
    total = 0
    for workload in workloads:
        if not _asks_for_quota(workload):
            continue
        for pod_set in (workload.get("status") or {}).get("resourceRequests") or []:
            total += milli_quantity((pod_set.get("resources") or {}).get(MILLI_RESOURCE, 0))
    return total


_QUANTITY = re.compile(
    r"(?P<number>\d{1,18}(?:\.\d{0,18})?|\.\d{1,18})"
    r"(?:[eE](?P<exponent>[+-]?\d{1,2})|(?P<suffix>[KMGTPE]i|[mkMGTPE]))?"
)
_SUFFIXES = {"m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_SUFFIXES |= {f"{unit}i": 2 ** (10 * power) for power, unit in enumerate("KMGTPE", start=1)}


def milli_quantity(value: Any) -> int:
    """A Kubernetes quantity of fracnb.io/gpu-milli as an integer: Kueue writes "250", 250 or "1k", an admin's
    ClusterQueue may say "1.5k" or "2e3" (rounded up, as Kubernetes rounds quantities). QuantityError otherwise."""
    match = _QUANTITY.fullmatch(str(value).strip())
    if isinstance(value, bool) or match is None:
        raise QuantityError(f"{value!r} is not a quantity of {MILLI_RESOURCE}")
    scale = Fraction(10) ** int(match["exponent"]) if match["exponent"] else _SUFFIXES.get(match["suffix"] or "", 1)
    return math.ceil(Fraction(match["number"]) * scale)
