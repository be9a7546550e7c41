"""The contract every fracnb pod carries: ``FRACNB_*`` variables and ``fracnb.io/*`` labels and
annotations (docs/contract.md), as pod fields. Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fracnb_spawner.common import podkeys as keys
from fracnb_spawner.common.labels import label_value
from fracnb_spawner.common.units import format_decimal, format_fraction
from fracnb_spawner.gpu.backends import PodFields

if TYPE_CHECKING:
    from fracnb_spawner.culling import CullPolicy
    from fracnb_spawner.gpu.plan import GPUPlan


def contract_fields(
    plan: GPUPlan,
    *,
    profile: str,
    choice: str,
    cull: CullPolicy,
    model: str | None,
    display_name: str | None = None,
) -> PodFields:
    """The ``FRACNB_*`` environment and ``fracnb.io/*`` labels and annotations (docs/contract.md).

    ``display_name`` is the profile's name on the form, which the notebook shows instead of the slug.
    """
    backend = plan.backend
    environment = {
        "FRACNB_PROFILE": profile,
        "FRACNB_CHOICE": choice,
        "FRACNB_GPU_FRACTION": format_decimal(plan.fraction),
        "FRACNB_GPU_MEMORY_LIMIT": str(plan.memory_bytes),
        "FRACNB_GPU_BACKEND": backend,
        "FRACNB_ISOLATION": plan.isolation,
    }
    if model:
        environment["FRACNB_GPU_MODEL"] = model
    if display_name and display_name.strip():
        environment["FRACNB_PROFILE_DISPLAY_NAME"] = display_name.strip()
    labels = {
        # A label value has a strict syntax; the annotation keeps the slug as configured.
        keys.PROFILE_LABEL: label_value(profile),
        keys.BACKEND_LABEL: backend,
        keys.FRACTION_LABEL: format_decimal(plan.fraction),
    }
    annotations = {
        keys.PROFILE_ANNOTATION: profile,
        keys.FRACTION_ANNOTATION: format_fraction(plan.fraction),
        keys.GPU_MEMORY_ANNOTATION: str(plan.memory_bytes),
        keys.CHOICE_ANNOTATION: choice,
        keys.ISOLATION_ANNOTATION: plan.isolation,
        keys.IDLE_TIMEOUT_ANNOTATION: str(cull.idle_timeout),
        keys.MAX_AGE_ANNOTATION: str(cull.max_age),
    }
    if plan.fraction > 0 and cull.demand_timeout:
        annotations[keys.IDLE_TIMEOUT_UNDER_DEMAND_ANNOTATION] = str(cull.demand_timeout)
    if plan.fraction > 0 and cull.gpu_unused_timeout:
        annotations[keys.GPU_UNUSED_TIMEOUT_ANNOTATION] = str(cull.gpu_unused_timeout)
    if plan.fraction > 0 and cull.gpu_unused_busy_timeout:
        annotations[keys.GPU_UNUSED_BUSY_TIMEOUT_ANNOTATION] = str(cull.gpu_unused_busy_timeout)
    return PodFields(labels=labels, annotations=annotations, environment=environment)
