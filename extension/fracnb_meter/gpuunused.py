"""How long each kernel, and the server as a whole, has done no GPU work (pure, no I/O).

Every fresh NVML reading says which processes did GPU work since the reading before: NVML's
per-process utilisation samples list each process with some non-zero utilisation (SMs, memory
bandwidth, encoder, decoder) since the ``lastSeenTimeStamp`` the meter passes. A kernel worked
when one of its processes (itself or a descendant, such as a DataLoader worker) is listed.

Time is counted in windows of WINDOW_SECONDS (30 s, the windows of Run:ai's GPU idle time; the
meter's ``gpu_unused_window``), from the first reading that sees the kernel:

- a window with any GPU work is *used*: the count goes back to 0 (at once, not at the window's end);
- a window without GPU work, with data for all of it, is *unused*: the count grows by a window;
- a window with a stretch without data is *unknown*, never unused, and the count becomes unknown
  until the next unused window starts it again from 30 s: the GPU may have worked unseen.

No data means: NVML could not be read; the GPUs give no per-process samples (MIG instances,
drivers without the call); inside a container, a driver before 570.86.15 (its samples carry host
pids, which would make every kernel look unused; attribution.NAMESPACED_UTILIZATION_DRIVER); MPS,
where the work runs in the MPS server's process; a kernel that is not a local process; or more
than MAX_READING_GAP_SECONDS between two readings, since the driver keeps only about
SAMPLE_BUFFER_SECONDS of samples and older ones are lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .attribution import ParentOf, find_owners, per_process_utilization_support
from .nvml import NO_SAMPLES, GpuReading

WINDOW_SECONDS = 30
# The driver's ring of utilisation samples wraps after about 10 s (NVIDIA/open-gpu-kernel-modules,
# ctrl2080perf.h: "This circular queue wraps around after 10 seconds of sampling").
SAMPLE_BUFFER_SECONDS = 10.0
# Longer gaps between readings count as unknown: a margin below the buffer for a loaded machine.
MAX_READING_GAP_SECONDS = 8.0

NOT_MEASURED = "GPU-unused time is not measured here."
FIRST_WINDOW = "Not measured yet: the first window is not over."
NOT_LOCAL = "The kernel is not a local process: its GPU work cannot be seen."
MPS = "Under MPS, GPU work runs in the MPS server's process: NVML cannot tell whose it is."


@dataclass(frozen=True)
class Work:
    """Whether a set of processes did GPU work over the stretch a reading covers; None: unknown, and why."""

    worked: bool | None
    reason: str | None = None


@dataclass(frozen=True)
class ServerWork:
    """The server's work (all its processes) and each kernel's, by kernel id, over one reading's stretch."""

    server: Work
    kernels: Mapping[str, Work]


def sharing_blocks(backend: str | None, isolation: str | None, env: Mapping[str, str]) -> str | None:
    """Why the GPU's sharing hides whose work it is (MPS), or None."""
    mps = backend == "mps" or (backend == "dra" and isolation == "enforced")  # a dra slice with an MPS limit
    return MPS if mps or env.get("CUDA_MPS_PIPE_DIRECTORY") else None


def _unknown_reason(reading: GpuReading, in_container: bool) -> str | None:
    if not reading.available:
        return reading.reason or "NVML could not be read."
    if reading.busy_pids is None:
        return reading.utilization_reason or NO_SAMPLES
    supported, reason = per_process_utilization_support(reading.driver_version, in_container)
    return None if supported else f"{reason}."


def work_of(
    reading: GpuReading,
    kernel_pids: Mapping[str, int | None],
    server_pid: int,
    parent_of: ParentOf,
    *,
    in_container: bool,
    blocked: str | None = None,
) -> ServerWork:
    """Who did GPU work in the stretch ``reading`` covers: the server's processes, and each kernel (id -> pid)."""
    reason = blocked or _unknown_reason(reading, in_container)
    if reason is not None or reading.busy_pids is None:
        unknown = Work(None, reason)
        return ServerWork(unknown, dict.fromkeys(kernel_pids, unknown))
    local = {pid for pid in kernel_pids.values() if pid is not None}
    owners = find_owners(reading.busy_pids, local, server_pid, parent_of).values()
    working = {owner.kernel_pid for owner in owners}
    server = any(owner.in_server or owner.kernel_pid is not None for owner in owners)
    kernels = {kid: Work(None, NOT_LOCAL) if pid is None else Work(pid in working) for kid, pid in kernel_pids.items()}
    return ServerWork(Work(server), kernels)


class UnusedCount:
    """The GPU-unused count of one set of processes (a kernel's, or the server's), fed reading by reading."""

    def __init__(self, at: float, first: Work | None = None, window: int = WINDOW_SECONDS) -> None:
        self.window = window
        self._last_at = at
        self._window_start = at
        self._worked = False
        self._gap_reason: str | None = None  # a stretch of the open window without data, and why
        self._windows: int | None = None  # unused windows since the last used or unknown one; None: unknown
        self._reason: str | None = FIRST_WINDOW
        if first is not None and first.worked:
            self._windows, self._reason = 0, None

    @property
    def seconds(self) -> int | None:
        """GPU-unused time in whole windows; None when unknown (see ``reason``)."""
        return None if self._windows is None else self._windows * self.window

    @property
    def reason(self) -> str | None:
        return self._reason if self._windows is None else None

    def as_json(self) -> dict[str, Any]:
        """The shape of gpu-unused.schema.json."""
        return {"seconds": self.seconds, "reason": self.reason}

    def observe(self, at: float, work: Work) -> None:
        """The work of the stretch from the previous reading to ``at`` (monotonic seconds)."""
        if at <= self._last_at:
            return
        gap = at - self._last_at
        if not work.worked and gap > MAX_READING_GAP_SECONDS:
            reason = f"The meter read no GPU samples for {gap:.0f} s; NVML keeps only about 10 s of them."
            work = Work(None, work.reason or reason)
        if work.worked:
            self._windows, self._reason = 0, None
        while self._last_at < at:
            end = min(at, self._window_start + self.window)
            self._worked = self._worked or bool(work.worked)
            if work.worked is None:
                self._gap_reason = work.reason or "No data."
            self._last_at = end
            if end >= self._window_start + self.window:
                self._close_window()

    def _close_window(self) -> None:
        if self._worked:
            self._windows, self._reason = 0, None
        elif self._gap_reason is not None:
            self._windows, self._reason = None, self._gap_reason
        else:
            self._windows, self._reason = (self._windows or 0) + 1, None
        self._window_start += self.window
        self._worked, self._gap_reason = False, None


class GpuUnused:
    """The server's count and each running kernel's (by kernel id), counted once per NVML read."""

    def __init__(self, window: int = WINDOW_SECONDS) -> None:
        self.window = window
        self.server: UnusedCount | None = None
        self.kernels: dict[str, UnusedCount] = {}
        self._last_read: int | None = None
        self._context: dict[str, Any] | None = None

    def observe(self, read: int, at: float, work: ServerWork) -> bool:
        """One reading's work at ``at`` (monotonic seconds); False when read number ``read`` was counted
        already (the sampler hands out its last reading again within its floor interval). Kernels seen
        for the first time count from ``at``; gone ones are dropped."""
        if read == self._last_read:
            return False
        self._last_read = read
        if self.server is None:
            self.server = UnusedCount(at, work.server, self.window)
        self.server.observe(at, work.server)
        for kernel_id, kernel_work in work.kernels.items():
            count = self.kernels.get(kernel_id)
            if count is None:
                self.kernels[kernel_id] = UnusedCount(at, kernel_work, self.window)
            else:
                count.observe(at, kernel_work)
        for gone in set(self.kernels) - set(work.kernels):
            del self.kernels[gone]
        return True

    def server_json(self) -> dict[str, Any]:
        return self.server.as_json() if self.server is not None else not_measured(FIRST_WINDOW)

    def kernel_json(self, kernel_id: str) -> dict[str, Any]:
        count = self.kernels.get(kernel_id)
        return count.as_json() if count is not None else not_measured(FIRST_WINDOW)

    def note(self, *, measured_at: str, gpu_memory_bytes: int | None, busy_kernels: int) -> None:
        """What the latest counted reading saw besides GPU work, for :meth:`report`."""
        self._context = {
            "measured_at": measured_at,
            "window_seconds": self.window,
            "gpu_memory_bytes": gpu_memory_bytes,
            "busy_kernels": busy_kernels,
        }

    def report(self) -> dict[str, Any] | None:
        """The session report's gpu_unused (schemas/gpu-unused.schema.json#/$defs/serverReport); None before
        the first reading."""
        if self._context is None:
            return None
        return {**self.server_json(), **self._context}


def not_measured(reason: str = NOT_MEASURED) -> dict[str, Any]:
    return {"seconds": None, "reason": reason}
