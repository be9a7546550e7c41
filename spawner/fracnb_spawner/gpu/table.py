"""Every GPU-sharing backend, one record each: the one place to add a backend (docs/spawner.md).

A record says what the rest of fracnb needs to know about a mechanism:

- its name (the ``backend`` key of a profile's ``gpu`` entry, ``FRACNB_GPU_BACKEND`` in the pod);
- who enforces the memory budget (``FRACNB_ISOLATION``, and the words the form and the dry run use);
- how a fraction is planned (equal 1/N slots; a full GPU as a whole one; MIG profiles);
- the pod fields it needs (a pure function of the plan, in :mod:`.backends` or its own module);
- how the spawn form and the GPU queue count its free capacity (a ``Counting`` tag, which
  :mod:`fracnb_spawner.cluster.slots` maps to what its pods compete for);
- how the scheduler's refusals read when every matching GPU is taken, rather than none offered.

The notebook side (``fracnb_meter``) never imports this module: the names and isolation levels
are the enums of ``extension/fracnb_meter/schemas/pod-environment.schema.json``, which a test
checks against :data:`TABLE`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from fracnb_spawner.gpu import backends, dra
from fracnb_spawner.gpu.backends import BackendSettings, PodFields, soft_caps
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


TABLE: tuple[Backend, ...] = (
    Backend(
        "time-slicing", NOT_ENFORCED, backends.time_slicing_fields, equal_slots=True, full_gpu_is_whole=True
    ),
    Backend(
        "mps", Isolation("per-process", "per process (MPS)"), backends.mps_fields,
        equal_slots=True, full_gpu_is_whole=True,
    ),
    Backend("mig", HARD, backends.mig_fields, mig_profiles=True),
    Backend(
        "hami", Isolation("enforced", "enforced by HAMi"), backends.hami_fields,
        own_scheduler=True, counted_by="not-counted", build_whole=backends.hami_whole_fields,
    ),
    Backend(
        "kai", NOT_ENFORCED, backends.kai_fields, full_gpu_is_whole=True, own_scheduler=True,
        counted_by="not-counted", build_whole=backends.kai_whole_fields,
    ),
    Backend(
        "dra", NOT_ENFORCED, dra.dra_fields, own_scheduler=True, mig_profiles=True, counted_by="dra",
        full_markers=dra.FULL_MARKERS, isolation_for=dra.isolation_of, build_whole=dra.dra_whole_fields,
        sharing_modes=dra.SHARING_VALUES,
    ),
    # Not selectable: what a plan becomes for ``count`` whole GPUs, and for a CPU-only profile.
    Backend("whole", WHOLE, backends.whole_fields, selectable=False),
    Backend("none", NO_GPU, backends.cpu_only_fields, selectable=False),
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
