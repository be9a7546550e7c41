"""Where a restore puts arrays that were saved on a GPU. Pure.

All of them go back to the GPU, or all stay in host memory: a model half on the GPU and half in
host memory would fail at its first step, with an error far from the cause.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..wording import format_bytes


@dataclass(frozen=True)
class Placement:
    on_gpu: bool
    notice: str | None  # one line for the user when the arrays stay in host memory


def choose_placement(
    device_bytes: int,
    *,
    gpu_free_bytes: int | None,
    budget_bytes: int | None,
    server_used_bytes: int | None,
) -> Placement:
    """``gpu_free_bytes`` None: no GPU usable by the frameworks saved; ``budget_bytes`` None: no
    fractional budget (FRACNB_GPU_MEMORY_LIMIT unset); 0 means a CPU-only server."""
    if device_bytes == 0:
        return Placement(on_gpu=False, notice=None)
    amount = format_bytes(device_bytes)
    if gpu_free_bytes is None or budget_bytes == 0:
        return Placement(False, f"GPU arrays ({amount}) were restored to host memory: this server has no GPU.")
    if budget_bytes is not None:
        left = max(0, budget_bytes - (server_used_bytes or 0))
        if device_bytes > left:
            return Placement(
                False,
                f"GPU arrays ({amount}) were restored to host memory: they do not fit in the "
                f"{format_bytes(left)} left of this server's {format_bytes(budget_bytes)} GPU budget.",
            )
    if device_bytes > gpu_free_bytes:
        return Placement(
            False,
            f"GPU arrays ({amount}) were restored to host memory: the GPU has only "
            f"{format_bytes(gpu_free_bytes)} free.",
        )
    return Placement(on_gpu=True, notice=None)
