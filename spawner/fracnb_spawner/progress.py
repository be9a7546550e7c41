"""Plain-language spawn progress for GPU pods that wait for a free slot."""

from __future__ import annotations

from collections.abc import Mapping

from .backend_table import backend_named
from .gpu import GPUPlan
from .quota import share_words
from .units import format_bytes


def describe_plan(plan: GPUPlan) -> str:
    """ "0.25 GPU (time-slicing)", "1g.10gb MIG slice", "2 GPUs", "no GPU"."""
    if plan.backend == "none":
        return "no GPU"
    if plan.mig_slice is not None:  # the mig backend's, or a MIG device claimed through dra
        return f"{plan.mig_slice.profile} MIG slice"
    if plan.backend == "whole":
        return share_words(plan.fraction)
    return f"{share_words(plan.fraction)} ({plan.backend})"


def plan_summary(plan: GPUPlan) -> str:
    """One line for forms and the dry run: share, memory budget and who enforces it."""
    if plan.backend == "none":
        return "CPU only, no GPU visible"
    return f"{describe_plan(plan)}, {format_bytes(plan.memory_bytes)} GPU memory, {plan.isolation_words}"


def _where(plan: GPUPlan) -> str:
    return f" on a {plan.product}" if plan.product else ""


def no_node_reason(plan: GPUPlan) -> str:
    """Why a choice can never start: no node of the cluster offers it (shown on the form and as the refusal)."""
    return (
        f"no node in this cluster offers {describe_plan(plan)}{_where(plan)}, so it cannot start; "
        "choose another option, or ask your hub admin"
    )


def _waits_for_a_slot(scheduler_text: str, plan: GPUPlan | None) -> bool:
    # "0/10 nodes are available: 2 Insufficient nvidia.com/gpu.shared, 8 node(s) didn't match ...":
    # some node offers the resource and is full. Without "Insufficient", no node offers it at all.
    # Each backend's record says how its scheduler words "full" (backend_table.Backend.full_markers).
    backend = (plan.scheduler_backend or plan.backend) if plan else "none"
    return any(marker in scheduler_text for marker in backend_named(backend).full_markers)


def waiting_message(plan: GPUPlan | None, raw_event: Mapping) -> str | None:
    """A plain headline for a scheduler's "no room" event about the user's GPU share, else None.

    "Waiting for a slot" only when slots exist and are all taken; when no node offers the share,
    it says so. The scheduler's own text stays in the event log (the raw event KubeSpawner reports).
    """
    if plan is None or plan.backend == "none":
        return None
    if raw_event.get("reason") != "FailedScheduling":
        return None
    share = describe_plan(plan)
    if not _waits_for_a_slot(str(raw_event.get("message") or ""), plan):
        return (
            f"No node in this cluster offers {share}{_where(plan)} right now: "
            "your server starts only if one is added (see the event log)."
        )
    slot = f"a free {share} slot" if plan.backend not in ("whole",) else f"{share} to be free"
    return (
        f"Waiting for {slot}{_where(plan)}: every matching GPU is in use right now. "
        "Your server starts as soon as one is released."
    )


def unschedulable_message(plan: GPUPlan | None, waited_seconds: float, *, slots_exist: bool) -> str:
    """The refusal when no node took the pod in time: plain words; the scheduler's text goes to the log.

    ``slots_exist``: some node offers the share (all were taken), rather than none at all.
    """
    share = describe_plan(plan) if plan else "this server"
    headline = f"No node could take {share} within {waited_seconds:g} s"
    if slots_exist:
        return f"{headline}: every matching GPU stayed in use. Try again later, or choose a smaller share."
    where = _where(plan) if plan else ""
    return f"{headline}: no node in this cluster offers it{where}. Choose another option, or ask your hub admin."


def scheduler_saw_slots(scheduler_text: str, plan: GPUPlan | None = None) -> bool:
    """Whether the scheduler's refusal says some node offers the resource (and is full)."""
    return _waits_for_a_slot(scheduler_text, plan)
