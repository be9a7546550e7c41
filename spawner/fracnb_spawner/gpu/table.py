"""Every GPU-sharing backend, one record each: the one place to add a backend (docs/spawner.md).

A record says what the rest of fracnb needs to know about a mechanism:

- its name (the ``backend`` key of a profile's ``gpu`` entry, ``FRACNB_GPU_BACKEND`` in the pod);
- who enforces the memory budget (``FRACNB_ISOLATION``, and the words the form and the dry run use);
- how a fraction is planned (equal 1/N slots; a full GPU as a whole one; MIG profiles);
- the pod fields it needs (a pure function of the plan, written below beside its record, or in its own
  module when it is large: :mod:`.dra`);
- how the spawn form and the GPU queue count its free capacity (a ``Counting`` tag, which
  :mod:`fracnb_spawner.cluster.slots` maps to what its pods compete for);
- how the scheduler's refusals read when every matching GPU is taken, rather than none offered.

The notebook side (``fracnb_meter``) never imports this module: the names and isolation levels
are the enums of ``extension/fracnb_schemas/schemas/pod-environment.schema.json``, which a test
checks against :data:`TABLE`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from fracnb_spawner.common.units import format_decimal
from fracnb_spawner.gpu import dra
from fracnb_spawner.gpu.backends import (
    HAMI_CORES_RESOURCE,
    HAMI_GPU_POLICY_ANNOTATION,
    HAMI_MEMORY_PERCENT_RESOURCE,
    HAMI_MEMORY_RESOURCE,
    KAI_FRACTION_ANNOTATION,
    WHOLE_GPU_RESOURCE,
    BackendSettings,
    PodFields,
    soft_caps,
)
from fracnb_spawner.gpu.plan import HARD, NO_GPU, NOT_ENFORCED, WHOLE, GPUPlan, Isolation

Build = Callable[[GPUPlan, BackendSettings], PodFields]

# How the spawn form and the GPU queue count a backend's free capacity (fracnb_spawner.cluster.slots
# maps each to an ask): node allocatable minus pods' requests of the pod's extended resource; or
# ResourceSlices minus allocated claims' consumed capacity; or not at all (another scheduler places
# the pod by its own books, and the hub never queues it).
Counting = Literal["extended-resource", "dra", "not-counted"]


@dataclass(frozen=True)
class Backend:
    """One GPU-sharing mechanism; see the module docstring for what each field is for."""

    name: str
    isolation: Isolation
    build: Build
    selectable: bool = True  # an admin may name it in ``backend`` / ``gpu_backend`` (not whole, none)
    equal_slots: bool = False  # a fraction must be 1/N: the GPU is cut in N equal replicas
    full_gpu_is_whole: bool = False  # fraction 1 is planned as one whole GPU of the device plugin
    own_scheduler: bool = False  # its whole GPUs (``count``) also go through its scheduler
    mig_profiles: bool = False  # accepts ``mig_profile``
    counted_by: Counting = "extended-resource"
    # Text in a FailedScheduling event meaning a matching GPU exists and is taken (not: none offered).
    full_markers: tuple[str, ...] = ("Insufficient",)
    isolation_for: Callable[[GPUPlan], Isolation] | None = None  # when the plan decides (dra)
    build_whole: Build | None = None  # its pod fields for ``count`` whole GPUs, when not the device plugin's
    sharing_modes: tuple[str, ...] = ()  # values of the ``sharing`` key it accepts

    def isolation_of(self, plan: GPUPlan) -> Isolation:
        return self.isolation_for(plan) if self.isolation_for else self.isolation


# ---- each backend's pod fields: pure, the plan and the cluster's names in, PodFields out ------------


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


TABLE: tuple[Backend, ...] = (
    Backend(
        "time-slicing", NOT_ENFORCED, time_slicing_fields, equal_slots=True, full_gpu_is_whole=True
    ),
    Backend(
        "mps", Isolation("per-process", "per process (MPS)"), mps_fields,
        equal_slots=True, full_gpu_is_whole=True,
    ),
    Backend("mig", HARD, mig_fields, mig_profiles=True),
    Backend(
        "hami", Isolation("enforced", "enforced by HAMi"), hami_fields,
        own_scheduler=True, counted_by="not-counted", build_whole=hami_whole_fields,
    ),
    Backend(
        "kai", NOT_ENFORCED, kai_fields, full_gpu_is_whole=True, own_scheduler=True,
        counted_by="not-counted", build_whole=kai_whole_fields,
    ),
    Backend(
        "dra", NOT_ENFORCED, dra.dra_fields, own_scheduler=True, mig_profiles=True, counted_by="dra",
        full_markers=dra.FULL_MARKERS, isolation_for=dra.isolation_of, build_whole=dra.dra_whole_fields,
        sharing_modes=dra.SHARING_VALUES,
    ),
    # Not selectable: what a plan becomes for ``count`` whole GPUs, and for a CPU-only profile.
    Backend("whole", WHOLE, whole_fields, selectable=False),
    Backend("none", NO_GPU, cpu_only_fields, selectable=False),
)  # fmt: skip

BACKENDS = tuple(backend.name for backend in TABLE if backend.selectable)
ISOLATION_LEVELS = tuple(dict.fromkeys(backend.isolation.level for backend in TABLE))
_BY_NAME = {backend.name: backend for backend in TABLE}


def backend_named(name: str) -> Backend:
    """The record of ``name``; a ``KeyError`` for names no plan can carry."""
    return _BY_NAME[name]


def backend_fields(plan: GPUPlan, settings: BackendSettings) -> PodFields:
    """The mechanism-specific part of the pod for ``plan``, with soft caps where nothing enforces the budget."""
    backend = backend_named(plan.backend)
    build = backend.build
    if plan.backend == "whole" and plan.scheduler_backend:
        build = backend_named(plan.scheduler_backend).build_whole or build
    fields = build(plan, settings)
    if plan.isolation == "none" and plan.backend != "none":
        fields.environment.update(soft_caps(plan, settings.soft_cap_ratio))
    return fields
