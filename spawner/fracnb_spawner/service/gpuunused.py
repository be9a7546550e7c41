"""The timing rule of the GPU-unused timeouts (docs/culling-and-quotas.md, "GPU-unused timeouts"). Pure.

The service hears of GPU use with the notebooks' session reports: up to one report interval after
the meter's reading, whose count moves in windows of 30 s. A server using its GPU may thus look
unused for that long, and a timeout must leave the warning lead beyond it, as an idle timeout must
beyond the activity report lag (:func:`fracnb_spawner.culling.timing_problem`).
"""

from __future__ import annotations

from collections.abc import Iterable

from fracnb_spawner.culling import CullTimingError

WINDOW_SECONDS = 30  # FracnbMeter.gpu_unused_window's default


def gpu_unused_report_lag(report_interval: float) -> float:
    """How late the service may hear that a server used its GPU (seconds)."""
    return report_interval + WINDOW_SECONDS


def gpu_unused_timing_problem(timeout: float, warning_lead: float, report_interval: float) -> str | None:
    lag = gpu_unused_report_lag(report_interval)
    if timeout <= 0 or timeout > lag + warning_lead:
        return None
    return (
        f"a GPU-unused timeout of {timeout:g} s is not more than FracnbService.warning_lead ({warning_lead:g} s)"
        f" plus how late the service may hear of GPU use ({lag:g} s: FracnbService.session_report_interval,"
        f" {report_interval:g} s, and one {WINDOW_SECONDS} s window): servers using their GPU would be warned;"
        f" make it more than {lag + warning_lead:g} s or shorten the warning lead"
    )


def check_gpu_unused_timing(timeouts: Iterable[tuple[str, float]], warning_lead: float, report_interval: float) -> None:
    """Raise :class:`CullTimingError` for the first ``(where, seconds)`` that cannot work."""
    for where, seconds in timeouts:
        problem = gpu_unused_timing_problem(seconds, warning_lead, report_interval)
        if problem:
            raise CullTimingError(f"{where}: {problem}")


def measurability(backend: str, isolation: str) -> tuple[bool, str]:
    """Whether the meter can measure GPU-unused time for a choice of this backend, and in words (the dry run).

    It needs NVML's per-process utilisation samples: none on MIG, and under MPS the work runs in the MPS
    server's process (fracnb_meter.gpuunused). A DRA choice with hard isolation may be a MIG slice.
    """
    if backend == "mig":
        return False, "no: MIG gives no per-process utilisation samples, so the GPU-unused timeouts never fire"
    if backend == "mps" or (backend == "dra" and isolation == "enforced"):
        return False, "no: under MPS the work runs in the MPS server's process, so the GPU-unused timeouts never fire"
    caveat = "; not on a MIG device the claim may get" if backend == "dra" and isolation == "hard" else ""
    return True, f"yes, with NVIDIA driver 570.86.15 or newer in the container{caveat}"
