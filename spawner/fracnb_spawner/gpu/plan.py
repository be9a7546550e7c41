"""What a ``gpu`` entry says (``GPUSpec``) and what one pod gets from it (``GPUPlan``): plain records.

A plan carries every fact later steps need, its isolation included, so that nothing below the
planner has to ask the backend table about a plan it was given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from fractions import Fraction

from fracnb_spawner.gpu import mig

AMOUNT_KEYS = ("fraction", "count", "mig_profile")  # each says how much GPU; one per entry


class GPUConfigError(ValueError):
    """A ``gpu`` entry that cannot work; the message names the problem and the fix."""


@dataclass(frozen=True)
class Isolation:
    """Who enforces the memory budget: the contract's level and the form's words for it."""

    level: str  # one of the schema's isolation enum: hard, enforced, per-process, none
    words: str


NOT_ENFORCED = Isolation("none", "not enforced (shared, soft caps only)")
HARD = Isolation("hard", "hard limit (hardware partition)")
WHOLE = Isolation("hard", "whole GPU: not shared, the whole device's memory")
NO_GPU = Isolation("none", "CPU only, no GPU visible")


@dataclass(frozen=True)
class GPUSpec:
    """A ``gpu`` entry as written by the admin, validated key by key."""

    fraction: Fraction | None = None
    count: int | None = None
    backend: str | None = None
    mig_profile: str | None = None
    memory: int | None = None
    product: str | None = None
    sharing: str | None = None

    def merged(self, override: GPUSpec) -> GPUSpec:
        """This spec with every key that ``override`` sets replaced.

        The amount keys exclude each other, so an override that sets a different one than
        this spec (``count`` here, ``fraction`` there) is a conflict, not a silent choice.
        """
        mine, theirs = self.amount_keys, override.amount_keys
        if mine and theirs and mine != theirs:
            raise GPUConfigError(
                f"its gpu {' and '.join(map(repr, theirs))} conflicts with the profile's gpu "
                f"{' and '.join(map(repr, mine))}; keep the amount in one place (the profile or each choice)"
            )
        changes = {f.name: getattr(override, f.name) for f in fields(override)}
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    @property
    def amount_keys(self) -> tuple[str, ...]:
        return tuple(key for key in AMOUNT_KEYS if getattr(self, key) is not None)

    @property
    def requests_gpu(self) -> bool:
        return any(v is not None for v in (self.fraction, self.count, self.mig_profile))


@dataclass(frozen=True)
class GPUDefaults:
    """Spawner-wide settings that a spec falls back on (``FractionalTraits.gpu_defaults``)."""

    backend: str
    gpu_memory: int
    mig_model: str
    memory_by_product: Mapping[str, int] | None = None


@dataclass(frozen=True)
class GPUPlan:
    """What one pod gets: resolved backend, GPUs held, memory budget, placement details, and who
    enforces the budget (set by :func:`fracnb_spawner.gpu.resolve.plan_gpu`)."""

    backend: str
    fraction: Fraction
    memory_bytes: int
    device_memory: int = 0
    replicas: int | None = None
    mig_slice: mig.MigSlice | None = None
    product: str | None = None
    scheduler_backend: str | None = None
    sharing: str | None = None  # the backend's sharing mode (dra: time-slicing, mps or mig)
    enforcement: Isolation = field(default=NOT_ENFORCED, kw_only=True)

    @property
    def isolation(self) -> str:
        """Who enforces the memory budget (the contract's ``FRACNB_ISOLATION``)."""
        return self.enforcement.level

    @property
    def isolation_words(self) -> str:
        """The same in words, for the form and the dry run."""
        return self.enforcement.words


CPU_ONLY = GPUPlan(backend="none", fraction=Fraction(0), memory_bytes=0, enforcement=NO_GPU)
