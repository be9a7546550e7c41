"""The MIG profile catalogue and the choice of a MIG slice for a fraction of a GPU.

Profile names and memory sizes follow NVIDIA's mig-parted default configuration. The
device plugin's mixed strategy advertises each profile as ``nvidia.com/mig-<name>``
with ``+`` replaced by ``.``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

_PROFILE_PATTERN = re.compile(r"(?P<compute>\d+)g\.(?P<memory>\d+)gb(?P<suffix>[+.][a-z.+]+)?")


@dataclass(frozen=True)
class MigModel:
    """A MIG-capable GPU model: its nominal memory and the profiles it can be split into."""

    key: str
    memory_gb: int
    product_patterns: tuple[str, ...]
    profiles: tuple[str, ...]


CATALOGUE: tuple[MigModel, ...] = (
    MigModel("A100-40GB", 40, ("A100-SXM4-40GB", "A100-PCIE-40GB", "A800-40GB", "A100-40GB"),
             ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")),
    MigModel("A100-80GB", 80, ("A100-SXM4-80GB", "A100-PCIE-80GB", "A100-80GB", "A800-80GB"),
             ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
    MigModel("A30-24GB", 24, ("A30",),
             ("1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb")),
    MigModel("H100-80GB", 80, ("H100-80GB", "H100-SXM5-80GB", "H100-PCIe", "H800-80GB", "H100"),
             ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
    MigModel("H100-94GB", 94, ("H100-NVL", "H100-94GB", "H800-NVL"),
             ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb")),
    MigModel("H200-141GB", 141, ("H200",),
             ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")),
    MigModel("B200", 180, ("B200",),
             ("1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb")),
)  # fmt: skip

MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
KNOWN_PROFILES: frozenset[str] = frozenset(p for model in CATALOGUE for p in model.profiles)


class MigError(ValueError):
    """A MIG request that no known GPU model can satisfy; the message says what exists."""


@dataclass(frozen=True)
class MigSlice:
    profile: str
    compute_slices: int
    memory_gb: int

    @property
    def resource_name(self) -> str:
        return MIG_RESOURCE_PREFIX + self.profile.replace("+", ".")


def parse_profile(name: str) -> MigSlice:
    match = _PROFILE_PATTERN.fullmatch(name)
    if match is None:
        raise MigError(f"{name!r} is not a MIG profile name such as '1g.10gb'")
    return MigSlice(name, int(match["compute"]), int(match["memory"]))


def model_by_key(key: str) -> MigModel:
    for model in CATALOGUE:
        if model.key == key:
            return model
    known = ", ".join(model.key for model in CATALOGUE)
    raise MigError(f"unknown MIG GPU model {key!r}; known models: {known}")


def model_for_product(product: str) -> MigModel | None:
    """The catalogue entry for a GPU product label such as 'NVIDIA-A100-SXM4-80GB'."""
    normalised = product.upper().removeprefix("NVIDIA-").removesuffix("-SHARED")
    best: MigModel | None = None
    best_length = 0
    for model in CATALOGUE:
        for pattern in model.product_patterns:
            if pattern.upper() in normalised and len(pattern) > best_length:
                best, best_length = model, len(pattern)
    return best


def check_profile(profile: str, model: MigModel | None) -> MigSlice:
    """Validate a MIG profile name against a model's catalogue (or every model's, if None)."""
    slice_ = parse_profile(profile)
    allowed = model.profiles if model else tuple(sorted(KNOWN_PROFILES))
    if profile not in allowed:
        where = f"the {model.key}" if model else "any known GPU"
        raise MigError(f"MIG profile {profile!r} does not exist on {where}; choose one of: {', '.join(allowed)}")
    return slice_


def memory_share(slice_: MigSlice, model: MigModel) -> Fraction:
    """The share of the GPU's memory a slice holds, in eighths (MIG splits memory in 8 slices).

    Profile names carry rounded sizes (a quarter of an H200's 141 GB is "35gb"), so the
    share is the nearest eighth rather than the ratio of the names.
    """
    return Fraction(max(1, round(slice_.memory_gb * 8 / model.memory_gb)), 8)


def smallest_slice_for(fraction: Fraction, model: MigModel) -> MigSlice:
    """The smallest MIG profile of ``model`` giving at least ``fraction`` of the GPU's memory.

    Ties on memory go to the profile with fewer compute slices, so that the rest of the
    GPU stays available; media-extension (+me) variants are never picked implicitly.
    """
    candidates = [parse_profile(p) for p in model.profiles if "+" not in p]
    fitting = [s for s in candidates if memory_share(s, model) >= fraction]
    if not fitting:
        raise MigError(f"no MIG profile of the {model.key} gives {float(fraction):g} of a GPU")
    return min(fitting, key=lambda s: (s.memory_gb, s.compute_slices))
