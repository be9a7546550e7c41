"""Plain-language spawn progress for GPU pods that wait for a free slot."""

from __future__ import annotations

from collections.abc import Mapping

from .gpu import GPUPlan, isolation_text
from .units import format_bytes, format_decimal


def describe_plan(plan: GPUPlan) -> str:
    """ "0.25 GPU (time-slicing)", "1g.10gb MIG slice", "2 GPUs", "no GPU"."""
    if plan.backend == "none":
        return "no GPU"
    if plan.backend == "mig" and plan.mig_slice is not None:
        return f"{plan.mig_slice.profile} MIG slice"
    if plan.backend == "whole":
        count = plan.fraction.numerator
        return f"{count} GPU" + ("s" if count > 1 else "")
    return f"{format_decimal(plan.fraction, 4)} GPU ({plan.backend})"


def plan_summary(plan: GPUPlan) -> str:
    """One line for forms and the dry run: share, memory budget and who enforces it."""
    if plan.backend == "none":
        return "CPU only, no GPU visible"
    enforcement = isolation_text(plan.backend, plan.isolation)
    return f"{describe_plan(plan)}, {format_bytes(plan.memory_bytes)} GPU memory, {enforcement}"


def waiting_message(plan: GPUPlan | None, raw_event: Mapping) -> str | None:
    """A message for the user when the scheduler reports no room for their GPU share, else None."""
    if plan is None or plan.backend == "none":
        return None
    if raw_event.get("reason") != "FailedScheduling":
        return None
    text = str(raw_event.get("message") or "")
    if "Insufficient" not in text and "didn't match" not in text and "affinity/selector" not in text:
        return None
    share = describe_plan(plan)
    slot = f"a free {share} slot" if plan.backend not in ("whole",) else f"{share} to be free"
    where = f" on a {plan.product}" if plan.product else ""
    return (
        f"Waiting for {slot}{where}: every matching GPU is in use right now. "
        "Your server starts as soon as one is released."
    )
