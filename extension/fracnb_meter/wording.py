"""How the notebook side writes amounts for people: one style in the widget, the simulator and
the front end (extension/src/summary.ts writes the same)."""

from __future__ import annotations

_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def format_bytes(value: int) -> str:
    """2147483648 -> '2 GiB', 1610612736 -> '1.5 GiB', 524288000 -> '500 MiB'."""
    for unit, size in _UNITS:
        if value >= size:
            return f"{round(value / size, 1):g} {unit}"
    return f"{value} bytes"


def format_share(gpus: float) -> str:
    """A share of GPUs as decimals, as quotas are written: '0.25 GPU', '1 GPU', '2 GPUs', 'no GPU'."""
    if gpus <= 0:
        return "no GPU"
    return f"{round(gpus, 3):g} {'GPUs' if gpus > 1 else 'GPU'}"
