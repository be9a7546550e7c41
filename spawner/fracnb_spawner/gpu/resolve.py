"""The ``gpu`` key of a profile: parsing it, and resolving it into a plan for one pod.

Everything here is pure: values in, values (or a ``GPUConfigError``) out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from fractions import Fraction

from fracnb_spawner.common.labels import value_problem
from fracnb_spawner.common.units import QuantityError, format_bytes, format_fraction, parse_bytes, parse_fraction
from fracnb_spawner.gpu import mig
from fracnb_spawner.gpu.plan import CPU_ONLY, GPUConfigError, GPUDefaults, GPUPlan, GPUSpec
from fracnb_spawner.gpu.table import BACKENDS, backend_named

GPU_KEYS = ("fraction", "count", "backend", "mig_profile", "memory", "product", "sharing")
# A GPU shared by more than 64 notebooks leaves each too little to run anything; time-slicing
# and MPS need 1/fraction replicas per GPU, and KAI's annotation keeps 4 decimals.
MIN_FRACTION = Fraction(1, 64)
MAX_COUNT = 64  # more GPUs than any node has: such a pod could never be scheduled
MIN_MEMORY = 256 * 2**20  # less than a CUDA context needs


def parse_gpu_spec(raw: object) -> GPUSpec:
    """Validate a ``gpu`` mapping from the configuration."""
    if not isinstance(raw, Mapping):
        raise GPUConfigError(f"'gpu' must be a mapping such as {{'fraction': 0.25}}, not {raw!r}")
    unknown = sorted(str(k) for k in raw if k not in GPU_KEYS)
    if unknown:
        raise GPUConfigError(f"unknown gpu key(s) {', '.join(map(repr, unknown))}; valid keys: {', '.join(GPU_KEYS)}")
    spec = GPUSpec(
        fraction=_parse_fraction_key(raw["fraction"]) if "fraction" in raw else None,
        count=_parse_count(raw["count"]) if "count" in raw else None,
        backend=_parse_backend(raw["backend"]) if "backend" in raw else None,
        mig_profile=_parse_text(raw, "mig_profile"),
        memory=_parse_memory(raw["memory"]) if "memory" in raw else None,
        product=_parse_product(raw),
        sharing=_parse_sharing(raw),
    )
    if spec.fraction is not None and spec.count is not None:
        raise GPUConfigError("'fraction' and 'count' exclude each other; keep one of them")
    if spec.mig_profile is not None and len(spec.amount_keys) > 1:
        raise GPUConfigError("'mig_profile' sets the amount by itself; remove 'fraction' and 'count' next to it")
    if spec.mig_profile is not None:
        model = mig.model_for_product(spec.product) if spec.product else None
        try:
            mig.check_profile(spec.mig_profile, model)
        except mig.MigError as error:
            raise GPUConfigError(str(error)) from None
    return spec


def plan_gpu(spec: GPUSpec | None, defaults: GPUDefaults) -> GPUPlan:
    """Resolve a (merged) spec into the plan for one pod, or explain why it cannot work."""
    plan = _plan(spec, defaults)
    return with_enforcement(plan)


def with_enforcement(plan: GPUPlan) -> GPUPlan:
    """``plan`` with its isolation as its backend's record says (a plan read back from a hub's state)."""
    enforcement = backend_named(plan.backend).isolation_of(plan)
    return plan if plan.enforcement == enforcement else replace(plan, enforcement=enforcement)


def _plan(spec: GPUSpec | None, defaults: GPUDefaults) -> GPUPlan:
    if spec is None or not spec.requests_gpu:
        if spec is not None and (spec.backend or spec.memory or spec.product or spec.sharing):
            raise GPUConfigError("a gpu entry needs 'fraction', 'count' or 'mig_profile'")
        return CPU_ONLY
    if spec.mig_profile and spec.backend is not None and not backend_named(spec.backend).mig_profiles:
        with_profiles = " or ".join(b for b in BACKENDS if backend_named(b).mig_profiles)
        raise GPUConfigError(f"'mig_profile' needs the {with_profiles} backend, not {spec.backend!r}")
    backend = spec.backend or ("mig" if spec.mig_profile else defaults.backend)
    record = backend_named(backend)
    _check_sharing(spec, backend, record.sharing_modes)
    device_memory = _device_memory(spec.product, defaults)
    if spec.count is not None:
        return _plan_whole(spec, spec.count, backend, device_memory)
    if backend == "mig" or (record.mig_profiles and (spec.mig_profile or spec.sharing == "mig")):
        return _plan_mig(spec, defaults, backend)
    fraction = spec.fraction if spec.fraction is not None else Fraction(1)
    if fraction == 1 and record.full_gpu_is_whole:
        return _plan_whole(spec, 1, backend, device_memory)
    _check_memory(spec.memory, device_memory, "one GPU's memory", "ask for whole GPUs with 'count'")
    replicas = None
    if record.equal_slots:
        if fraction.numerator != 1:
            raise GPUConfigError(
                f"{backend} shares a GPU in equal slots, so the fraction must be 1/N "
                f"(for example 1/2, 1/4, 1/8), not {fraction}"
            )
        replicas = fraction.denominator
    budget = spec.memory or int(fraction * device_memory)
    return GPUPlan(backend, fraction, budget, device_memory, replicas, None, spec.product, sharing=spec.sharing)


def _plan_whole(spec: GPUSpec, count: int, backend: str, device_memory: int) -> GPUPlan:
    if backend == "mig":
        raise GPUConfigError("'count' asks for whole GPUs; for a MIG slice give 'mig_profile'")
    _check_memory(spec.memory, count * device_memory, f"the memory of {count} GPU(s)", "raise 'count'")
    scheduler = backend if backend_named(backend).own_scheduler else None
    budget = spec.memory or count * device_memory
    return GPUPlan(
        "whole", Fraction(count), budget, device_memory, product=spec.product,
        scheduler_backend=scheduler,
    )  # fmt: skip


def _check_sharing(spec: GPUSpec, backend: str, modes: tuple[str, ...]) -> None:
    if spec.sharing is None:
        return
    if spec.sharing not in modes:
        with_modes = [b for b in BACKENDS if backend_named(b).sharing_modes]
        raise GPUConfigError(
            f"'sharing: {spec.sharing}' does not apply to the {backend} backend; it is for the "
            f"{' or '.join(with_modes)} backend ({', '.join(backend_named(with_modes[0]).sharing_modes)})"
        )
    if spec.count is not None:
        raise GPUConfigError("'sharing' is for part of a GPU; whole GPUs ('count') are not shared")
    if spec.mig_profile is not None and spec.sharing != "mig":
        raise GPUConfigError(f"'sharing: {spec.sharing}' is for memory slices; a 'mig_profile' is a MIG device")


def _plan_mig(spec: GPUSpec, defaults: GPUDefaults, backend: str = "mig") -> GPUPlan:
    model = mig.model_for_product(spec.product) if spec.product else None
    if spec.product and model is None:
        raise GPUConfigError(f"GPU product {spec.product!r} has no known MIG profiles")
    try:
        model = model or mig.model_by_key(defaults.mig_model)
        if spec.mig_profile:
            slice_ = mig.check_profile(spec.mig_profile, model)
        else:
            slice_ = mig.smallest_slice_for(spec.fraction or Fraction(1), model)
    except mig.MigError as error:
        raise GPUConfigError(str(error)) from None
    share = min(mig.memory_share(slice_, model), Fraction(1))
    _check_memory(spec.memory, slice_.memory_gb * 2**30, f"the {slice_.profile} slice's memory", "pick a larger slice")
    budget = spec.memory or slice_.memory_gb * 2**30
    sharing = "mig" if backend != "mig" else None
    return GPUPlan(backend, share, budget, budget, mig_slice=slice_, product=spec.product, sharing=sharing)


def _check_memory(memory: int | None, available: int, what: str, fix: str) -> None:
    if memory is not None and memory > available:
        raise GPUConfigError(
            f"memory {format_bytes(memory)} is more than {what} ({format_bytes(available)}); lower it or {fix}"
            " (one GPU's memory is gpu_memory, or gpu_memory_by_product for the entry's product)"
        )


def _device_memory(product: str | None, defaults: GPUDefaults) -> int:
    if product and defaults.memory_by_product and product in defaults.memory_by_product:
        return defaults.memory_by_product[product]
    return defaults.gpu_memory


def _parse_fraction_key(value: object) -> Fraction:
    try:
        fraction = parse_fraction(value)
    except QuantityError as error:
        raise GPUConfigError(f"fraction {error}") from None
    if not 0 < fraction <= 1:
        raise GPUConfigError(f"fraction {value!r} is outside 0 < fraction <= 1; for more than one GPU use 'count'")
    if fraction < MIN_FRACTION:
        raise GPUConfigError(
            f"fraction {value!r} is less than {format_fraction(MIN_FRACTION)} of a GPU, too little to run a notebook;"
            f" use at least {format_fraction(MIN_FRACTION)}"
        )
    return fraction


def _parse_count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GPUConfigError(f"count {value!r} must be a whole number of GPUs >= 1; for part of a GPU use 'fraction'")
    if value > MAX_COUNT:
        raise GPUConfigError(f"count {value} is more than {MAX_COUNT} GPUs, more than any node has; lower it")
    return value


def _parse_backend(value: object) -> str:
    if value not in BACKENDS:
        raise GPUConfigError(f"unknown backend {value!r}; choose one of: {', '.join(BACKENDS)}")
    return str(value)


def _parse_memory(value: object) -> int:
    try:
        memory = parse_bytes(value)
    except QuantityError as error:
        raise GPUConfigError(f"memory {error}") from None
    if memory < MIN_MEMORY:
        raise GPUConfigError(f"memory {value!r} is less than {format_bytes(MIN_MEMORY)}, too little for a CUDA context")
    return memory


def _parse_text(raw: Mapping, key: str) -> str | None:
    if key not in raw:
        return None
    value = raw[key]
    if not isinstance(value, str) or not value.strip():
        raise GPUConfigError(f"{key} must be a non-empty string, not {value!r}")
    return value.strip()


def _parse_sharing(raw: Mapping) -> str | None:
    sharing = _parse_text(raw, "sharing")
    known = sorted({mode for name in BACKENDS for mode in backend_named(name).sharing_modes})
    if sharing is not None and sharing not in known:
        raise GPUConfigError(f"unknown sharing {sharing!r}; choose one of: {', '.join(known)}")
    return sharing


def _parse_product(raw: Mapping) -> str | None:
    product = _parse_text(raw, "product")
    # It becomes a node-selector value, with "-SHARED" appended for shared GPUs.
    problem = value_problem(product + "-SHARED") if product else None
    if problem:
        raise GPUConfigError(
            f"product {product!r} cannot be a node-selector value; write it as the nodes' nvidia.com/gpu.product"
            " label shows it, such as 'NVIDIA-A100-SXM4-80GB' (no spaces; at most 56 characters: letters, digits,"
            " '-', '_' and '.')"
        )
    return product
