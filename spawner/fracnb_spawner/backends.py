"""Pod fields per GPU-sharing mechanism: pure functions from a ``GPUPlan`` to manifest parts.

Each function returns the extended resources, node selector, scheduler, labels,
annotations and environment one mechanism needs; ``contract_fields`` adds the
``FRACNB_*`` contract (docs/contract.md) every pod carries. Which function serves which
backend is said once, in :mod:`.backend_table`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from .labels import label_value
from .mig import MIG_RESOURCE_PREFIX
from .units import format_decimal, format_fraction

if TYPE_CHECKING:
    from .culling import CullPolicy
    from .gpu import GPUPlan

LABEL_PREFIX = "fracnb.io/"
GPU_MEMORY_ANNOTATION = LABEL_PREFIX + "gpu-memory-limit"  # bytes of GPU memory the plan gives
GPU_VISIBILITY_VARIABLES = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "CUDA_DISABLE_CONTROL")
RESERVED_ENV_PREFIX = "FRACNB_"

# What the mechanisms below put in a pod to give it a GPU, in one place: a pod that carries any
# of it outside the ``gpu`` key gets GPUs that no quota counts (see :func:`is_gpu_resource`).
WHOLE_GPU_RESOURCE = "nvidia.com/gpu"
HAMI_CORES_RESOURCE = "nvidia.com/gpucores"
HAMI_MEMORY_RESOURCE = "nvidia.com/gpumem"
HAMI_MEMORY_PERCENT_RESOURCE = "nvidia.com/gpumem-percentage"
# Every name NVIDIA's device plugin (whole, shared, renamed, MIG) and HAMi advertise starts so.
GPU_RESOURCE_PREFIXES = (WHOLE_GPU_RESOURCE, MIG_RESOURCE_PREFIX)
HAMI_GPU_POLICY_ANNOTATION = "hami.io/gpu-scheduler-policy"  # which card of the node: binpack, spread, ...
KAI_FRACTION_ANNOTATION = "gpu-fraction"
# KAI also gives a GPU share for these (docs/spawner.md); fracnb writes only the fraction.
GPU_REQUEST_ANNOTATIONS = (KAI_FRACTION_ANNOTATION, "gpu-memory", "gpu-fraction-num-devices")


@dataclass(frozen=True)
class Isolation:
    """Who enforces the memory budget: the contract's level and the form's words for it."""

    level: str  # one of the schema's isolation enum: hard, enforced, per-process, none
    words: str


NOT_ENFORCED = Isolation("none", "not enforced (shared, soft caps only)")
HARD = Isolation("hard", "hard limit (hardware partition)")
WHOLE = Isolation("hard", "whole GPU: not shared, the whole device's memory")


@dataclass(frozen=True)
class BackendSettings:
    """Cluster-specific names, from the spawner's traits (whose defaults are the only ones)."""

    time_slicing_resource: str
    mps_resource: str
    hami_scheduler: str
    kai_scheduler: str
    kai_queue_label: str
    kai_queue: str
    soft_cap_ratio: float
    hami_gpu_policy: str = "binpack"
    whole_gpu_resource: str = WHOLE_GPU_RESOURCE  # the device plugin's own name; not configurable
    dra_device_class: str = "gpu.nvidia.com"
    dra_mig_device_class: str = "mig.nvidia.com"
    dra_driver: str = "gpu.nvidia.com"  # the DRA driver: its attributes' domain and opaque config's driver


def is_gpu_resource(name: str, settings: BackendSettings) -> bool:
    """Whether the extended resource ``name`` gives a pod (part of) a GPU under any backend."""
    configured = (settings.whole_gpu_resource, settings.time_slicing_resource, settings.mps_resource)
    return name in configured or name.startswith(GPU_RESOURCE_PREFIXES)


@dataclass(frozen=True)
class PodFields:
    resources: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    scheduler_name: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    # Pod-level parts: ``spec.resourceClaims`` entries, and objects the spawner creates beside the
    # pod (named after it) and deletes at stop; ``container_claims`` go to the notebook container.
    pod_claims: list[dict[str, Any]] = field(default_factory=list)
    container_claims: list[dict[str, Any]] = field(default_factory=list)
    companions: list[dict[str, Any]] = field(default_factory=list)


def cpu_only_fields(plan: GPUPlan, settings: BackendSettings) -> PodFields:
    # A runtime that honours the variable exposes no GPU to a pod that asked for none.
    return PodFields(environment={"NVIDIA_VISIBLE_DEVICES": "void"})


def _product_selector(plan: GPUPlan, suffix: str = "") -> dict[str, str]:
    return {"nvidia.com/gpu.product": plan.product + suffix} if plan.product else {}


def hami_whole_fields(plan: GPUPlan, settings: BackendSettings) -> PodFields:
    return PodFields(
        resources={WHOLE_GPU_RESOURCE: str(plan.fraction.numerator)},
        scheduler_name=settings.hami_scheduler,
        annotations=_hami_gputype(plan),
    )


def kai_whole_fields(plan: GPUPlan, settings: BackendSettings) -> PodFields:
    return PodFields(
        resources={WHOLE_GPU_RESOURCE: str(plan.fraction.numerator)},
        scheduler_name=settings.kai_scheduler,
        node_selector=_product_selector(plan),
        labels={settings.kai_queue_label: settings.kai_queue},
    )


def whole_fields(plan: GPUPlan, settings: BackendSettings) -> PodFields:
    """Whole GPUs from the device plugin (a backend with its own scheduler has its own ``build_whole``)."""
    count = str(plan.fraction.numerator)
    return PodFields(
        resources={settings.whole_gpu_resource: count},
        node_selector={"nvidia.com/gpu.sharing-strategy": "none", **_product_selector(plan)},
    )


def _shared(plan: GPUPlan, resource: str, strategy: str) -> PodFields:
    # GFD appends -SHARED to the product label unless the plugin renames the resource.
    suffix = "-SHARED" if resource == WHOLE_GPU_RESOURCE else ""
    return PodFields(
        resources={resource: "1"},
        node_selector={
            "nvidia.com/gpu.sharing-strategy": strategy,
            "nvidia.com/gpu.replicas": str(plan.replicas),
            **_product_selector(plan, suffix),
        },
    )


def time_slicing_fields(plan: GPUPlan, settings: BackendSettings) -> PodFields:
    return _shared(plan, settings.time_slicing_resource, "time-slicing")


def mps_fields(plan: GPUPlan, settings: BackendSettings) -> PodFields:
    return _shared(plan, settings.mps_resource, "mps")


def mig_fields(plan: GPUPlan, settings: BackendSettings) -> PodFields:
    assert plan.mig_slice is not None  # noqa: S101 - plan_gpu always sets it for mig
    return PodFields(
        resources={plan.mig_slice.resource_name: "1"},
        node_selector={"nvidia.com/mig.strategy": "mixed", **_product_selector(plan)},
    )


def _hami_gputype(plan: GPUPlan) -> dict[str, str]:
    return {"nvidia.com/use-gputype": plan.product} if plan.product else {}


def hami_fields(plan: GPUPlan, settings: BackendSettings) -> PodFields:
    percent = str(max(1, round(plan.fraction * 100)))
    resources = {WHOLE_GPU_RESOURCE: "1", HAMI_CORES_RESOURCE: percent}
    if plan.memory_bytes and plan.memory_bytes != int(plan.fraction * plan.device_memory):
        resources[HAMI_MEMORY_RESOURCE] = str(plan.memory_bytes // 2**20)
    else:
        resources[HAMI_MEMORY_PERCENT_RESOURCE] = percent
    policy = {HAMI_GPU_POLICY_ANNOTATION: settings.hami_gpu_policy} if settings.hami_gpu_policy else {}
    return PodFields(
        resources=resources,
        scheduler_name=settings.hami_scheduler,
        annotations={**_hami_gputype(plan), **policy},
    )


def kai_fields(plan: GPUPlan, settings: BackendSettings) -> PodFields:
    return PodFields(
        scheduler_name=settings.kai_scheduler,
        node_selector=_product_selector(plan),
        labels={settings.kai_queue_label: settings.kai_queue},
        annotations={KAI_FRACTION_ANNOTATION: format_decimal(plan.fraction, 4)},
    )


def soft_caps(plan: GPUPlan, ratio: float) -> dict[str, str]:
    """Framework allocator caps a little under the budget, for mechanisms that enforce nothing.

    They are cooperative (a user can lift them) and don't count the CUDA context, hence
    the margin. TensorFlow has no variable for a cap, only for on-demand growth.
    """
    cap_bytes = int(plan.memory_bytes * ratio)
    device_share = Fraction(cap_bytes, plan.device_memory) if plan.device_memory else Fraction(0)
    share_text = f"{float(device_share):.4f}"
    return {
        "FRACNB_SOFT_CAP_BYTES": str(cap_bytes),
        "PYTORCH_CUDA_ALLOC_CONF": f"per_process_memory_fraction:{share_text}",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": share_text,
        "CUPY_GPU_MEMORY_LIMIT": str(cap_bytes),
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
    }


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
        LABEL_PREFIX + "profile": label_value(profile),
        LABEL_PREFIX + "gpu-backend": backend,
        LABEL_PREFIX + "gpu-fraction": format_decimal(plan.fraction),
    }
    annotations = {
        LABEL_PREFIX + "profile": profile,
        LABEL_PREFIX + "gpu-fraction": format_fraction(plan.fraction),
        GPU_MEMORY_ANNOTATION: str(plan.memory_bytes),
        LABEL_PREFIX + "choice": choice,
        LABEL_PREFIX + "isolation": plan.isolation,
        LABEL_PREFIX + "idle-timeout": str(cull.idle_timeout),
        LABEL_PREFIX + "max-age": str(cull.max_age),
    }
    if plan.fraction > 0 and cull.demand_timeout:
        annotations[LABEL_PREFIX + "idle-timeout-under-demand"] = str(cull.demand_timeout)
    return PodFields(labels=labels, annotations=annotations, environment=environment)
