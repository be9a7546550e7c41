"""The notebook side of docs/contract.md: the budget the spawner put into the pod's environment
(schemas/pod-environment.schema.json).

Plain JupyterLab on a workstation has no ``FRACNB_*`` variables; every field is then None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from fracnb_schemas import POD_ENVIRONMENT, enum

# The lists live in the schema, which the spawner's tests check its pods against.
BACKENDS = enum(POD_ENVIRONMENT, "backend")
ISOLATIONS = enum(POD_ENVIRONMENT, "isolation")


class ContractError(ValueError):
    """A FRACNB_* variable holds a value the contract does not allow."""


@dataclass(frozen=True)
class Budget:
    """The GPU share granted to this server; None where the contract says nothing."""

    fraction: float | None = None
    memory_bytes: int | None = None
    isolation: str | None = None
    backend: str | None = None
    profile: str | None = None
    profile_display_name: str | None = None
    soft_cap_bytes: int | None = None

    def as_json(self) -> dict[str, object]:
        return asdict(self)


# NVIDIA's container runtime exposes no GPU for these values of NVIDIA_VISIBLE_DEVICES.
NO_DEVICE_VALUES = ("void", "none")
NO_GPU_REASON = "No GPU for this server: it was started with a CPU-only profile."


def gpu_withheld(budget: Budget, env: Mapping[str, str]) -> str | None:
    """Why this server must not read any GPU, or None when it may.

    A CPU-only pod (``FRACNB_GPU_BACKEND=none``, ``NVIDIA_VISIBLE_DEVICES=void``) may still
    see a node's driver library; what NVML would report there is somebody else's GPU.
    """
    if budget.backend == "none" or env.get("NVIDIA_VISIBLE_DEVICES", "").strip() in NO_DEVICE_VALUES:
        return NO_GPU_REASON
    return None


def stop_hibernation_timeout(env: Mapping[str, str]) -> int:
    """FRACNB_STOP_HIBERNATION_TIMEOUT: seconds this server may spend saving its idle kernels' variables
    when it stops; 0 when unset or not a whole number (the hub saves before the stops it makes itself)."""
    text = env.get("FRACNB_STOP_HIBERNATION_TIMEOUT", "").strip()
    return int(text) if text.isdigit() else 0


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ContractError(f"FRACNB_GPU_FRACTION={text!r} is not a non-negative decimal such as 0.25 or 2")
    return value


def _memory(text: str) -> int:
    if not text.isdigit():
        raise ContractError(
            f"FRACNB_GPU_MEMORY_LIMIT={text!r} is not a whole number of bytes such as 21474836480 (0 for CPU-only)"
        )
    return int(text)


def _choice(name: str, text: str, allowed: tuple[str, ...]) -> str:
    if text not in allowed:
        raise ContractError(f"{name}={text!r} is not one of {', '.join(allowed)}")
    return text


def _soft_cap(text: str) -> int:
    if not text.isdigit():
        raise ContractError(f"FRACNB_SOFT_CAP_BYTES={text!r} is not a whole number of bytes such as 20401094656")
    return int(text)


def read_budget(env: Mapping[str, str]) -> Budget:
    """Parse the contract variables; raise ContractError naming the bad variable."""

    def get(name: str) -> str | None:
        value = env.get(name)
        return value.strip() if value is not None and value.strip() else None

    fraction, memory = get("FRACNB_GPU_FRACTION"), get("FRACNB_GPU_MEMORY_LIMIT")
    isolation, backend = get("FRACNB_ISOLATION"), get("FRACNB_GPU_BACKEND")
    soft_cap = get("FRACNB_SOFT_CAP_BYTES")
    return Budget(
        fraction=None if fraction is None else _fraction(fraction),
        memory_bytes=None if memory is None else _memory(memory),
        isolation=None if isolation is None else _choice("FRACNB_ISOLATION", isolation, ISOLATIONS),
        backend=None if backend is None else _choice("FRACNB_GPU_BACKEND", backend, BACKENDS),
        profile=get("FRACNB_PROFILE"),
        profile_display_name=get("FRACNB_PROFILE_DISPLAY_NAME"),
        soft_cap_bytes=None if soft_cap is None else _soft_cap(soft_cap),
    )
