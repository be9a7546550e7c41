"""This server session's GPU statistics, kept from one usage reading to the next (pure, no I/O).

A *session* is one run of the Jupyter server: from the meter's start to the server's stop. The
meter feeds every usage document it builds to :meth:`SessionStats.observe`; what accumulates is
what the hub's fracnb service stores (schemas/session-report.schema.json) and what right-sizing
advice is computed from:

- the peak GPU memory of the server and of each kernel (by kernel id, which a kernel keeps when
  it restarts, so a peak survives the restart);
- the time spent at or above 80 % and 95 % of the memory budget;
- out-of-memory events: each time memory reaches the budget (``PINNED_SHARE`` of it) after being
  below, and each GPU out-of-memory error seen in a kernel's output (fracnb_meter.kernelwatch);
  an error and the reaching of the budget that go together count once (:meth:`SessionStats.record_oom_error`);
- the busy share: the part of the observed time the GPU worked for this server's processes,
  where NVML gives per-process utilisation samples.

Time between two readings counts at the level of the earlier one (memory is held until the next
reading shows otherwise), capped at ``max_gap`` seconds, so a suspended meter does not turn a
long pause into time spent near the budget. A future memory chart (a bounded history of
readings) belongs beside this module, not in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NEAR_SHARE = 0.80
FULL_SHARE = 0.95
PINNED_SHARE = 0.99  # the budget counts as reached at 99 %: allocators keep a little back
DEFAULT_MAX_GAP = 60.0


@dataclass(frozen=True)
class KernelReading:
    """One kernel in one reading: its id and name, and its GPU memory (None when unknown)."""

    id: str
    name: str
    memory_bytes: int | None


@dataclass(frozen=True)
class Reading:
    """What one usage reading says, at monotonic time ``at`` (seconds)."""

    at: float
    server_bytes: int | None
    kernels: tuple[KernelReading, ...] = ()
    busy: bool | None = None  # this server's processes used the GPU since the last reading; None: unknown


@dataclass
class KernelPeak:
    name: str
    peak_bytes: int | None = None
    oom_errors: int = 0
    last_oom_request: str | None = None  # the execution request of the last error counted


def _max(current: int | None, value: int | None) -> int | None:
    if value is None:
        return current
    return value if current is None else max(current, value)


def reading_from_usage(document: Mapping[str, Any], at: float, busy: bool | None = None) -> Reading:
    """The parts of a usage document (schemas/usage.schema.json) the statistics need."""
    kernels = tuple(
        KernelReading(kernel["id"], kernel["name"], kernel["gpu_memory_bytes"]) for kernel in document["kernels"]
    )
    return Reading(at=at, server_bytes=document["server"]["gpu_memory_bytes"], kernels=kernels, busy=busy)


@dataclass
class SessionStats:
    """Accumulates readings; ``budget_bytes`` None means thresholds and OOM by pinning are unknown."""

    budget_bytes: int | None
    max_gap: float = DEFAULT_MAX_GAP
    peak_bytes: int | None = None
    kernel_peaks: dict[str, KernelPeak] = field(default_factory=dict)
    observed_seconds: float = 0.0
    seconds_above_near: float = 0.0
    seconds_above_full: float = 0.0
    oom_events: int = 0
    busy_seconds: float = 0.0
    busy_known_seconds: float = 0.0
    _last: Reading | None = None
    _pinned: bool = False
    _pinning_has_error: bool = False  # the current stay at the budget is already one with an error
    _error_since_reading: bool = False  # an error counted as an event of its own since the last reading

    def observe(self, reading: Reading) -> None:
        if self._last is not None and reading.at > self._last.at:
            self._count_interval(self._last, min(reading.at - self._last.at, self.max_gap), reading.busy)
        self.peak_bytes = _max(self.peak_bytes, reading.server_bytes)
        for kernel in reading.kernels:
            peak = self.kernel_peaks.setdefault(kernel.id, KernelPeak(kernel.name))
            peak.name = kernel.name
            peak.peak_bytes = _max(peak.peak_bytes, kernel.memory_bytes)
        self._note_pinning(reading.server_bytes)
        self._error_since_reading = False
        if self._last is None or reading.at >= self._last.at:
            self._last = reading

    def _count_interval(self, held: Reading, seconds: float, busy: bool | None) -> None:
        self.observed_seconds += seconds
        share = self._share(held.server_bytes)
        if share is not None and share >= NEAR_SHARE:
            self.seconds_above_near += seconds
        if share is not None and share >= FULL_SHARE:
            self.seconds_above_full += seconds
        if busy is not None:  # the utilisation samples of a reading cover the time since the previous one
            self.busy_known_seconds += seconds
            self.busy_seconds += seconds if busy else 0.0

    def _share(self, used: int | None) -> float | None:
        if used is None or not self.budget_bytes:
            return None
        return used / self.budget_bytes

    def _note_pinning(self, used: int | None) -> None:
        share = self._share(used)
        if share is None:
            return
        pinned = share >= PINNED_SHARE
        if pinned and not self._pinned:
            # An error seen since the previous reading and this arrival at the budget are one event.
            self._pinning_has_error = self._error_since_reading
            if not self._error_since_reading:
                self.oom_events += 1
        self._pinned = pinned

    def record_oom_error(self, kernel_id: str, kernel_name: str, request_id: str | None = None) -> bool:
        """A GPU out-of-memory error in a kernel's output; False when it is one already counted.

        One per execution request (``request_id``, the message's parent ``msg_id``): a traceback
        printed to stderr and the exception that ends the cell are one error. The kernel's count
        takes every error; the session's ``oom_events`` takes an error as the event of memory
        reaching the budget when the two go together (the error arrives while memory stays at the
        budget, or the next reading finds it there), so that one failure counts once.
        """
        kernel = self.kernel_peaks.setdefault(kernel_id, KernelPeak(kernel_name))
        if request_id is not None and request_id == kernel.last_oom_request:
            return False
        kernel.last_oom_request = request_id
        kernel.oom_errors += 1
        if self._pinned and not self._pinning_has_error:
            self._pinning_has_error = True
        else:
            self.oom_events += 1
            self._error_since_reading = True
        return True

    @property
    def busy_share(self) -> float | None:
        if self.busy_known_seconds <= 0:
            return None
        return self.busy_seconds / self.busy_known_seconds

    def summary(self) -> dict[str, Any]:
        """The statistics part of a session report (schemas/session-report.schema.json)."""
        return {
            "peak_bytes": self.peak_bytes,
            "observed_seconds": round(self.observed_seconds, 3),
            "seconds_above_80": round(self.seconds_above_near, 3),
            "seconds_above_95": round(self.seconds_above_full, 3),
            "oom_events": self.oom_events,
            "oom_errors": sum(peak.oom_errors for peak in self.kernel_peaks.values()),
            "busy_share": None if self.busy_share is None else round(self.busy_share, 4),
        }

    def kernels(self) -> list[dict[str, Any]]:
        """Every kernel seen this session with its peak and its out-of-memory errors, highest peak first."""
        rows = [
            {"id": k, "name": p.name, "peak_bytes": p.peak_bytes, "oom_errors": p.oom_errors}
            for k, p in self.kernel_peaks.items()
        ]
        return sorted(rows, key=lambda row: -(row["peak_bytes"] or 0))
