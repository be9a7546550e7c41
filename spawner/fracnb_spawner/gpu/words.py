"""A GPU plan in words, for the form, the dry run, progress messages and the queue. Pure."""

from __future__ import annotations

from fracnb_spawner.common.units import format_bytes, share_words
from fracnb_spawner.gpu.plan import GPUPlan


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


def where(plan: GPUPlan) -> str:
    return f" on a {plan.product}" if plan.product else ""


def no_node_reason(plan: GPUPlan) -> str:
    """Why a choice can never start: no node of the cluster offers it (shown on the form and as the refusal)."""
    return (
        f"no node in this cluster offers {describe_plan(plan)}{where(plan)}, so it cannot start; "
        "choose another option, or ask your hub admin"
    )
