"""Pure functions: whose GPU memory is whose, and how far the numbers can be trusted.

Per-process GPU memory is attributed by matching NVML process ids to a kernel's pid and
its descendants. Inside a container, drivers before 565 either list host pids (which match
nothing here) or give no per-process memory; then no per-kernel number is reported at all.
Per-process utilisation samples need a newer driver still (NAMESPACED_UTILIZATION_DRIVER).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .nvml import GpuProcess

# Drivers from this version report per-process memory in the caller's pid namespace.
NAMESPACED_MEMORY_DRIVER = (565, 57, 1)

# Drivers from this version put the caller's pids into per-process utilisation samples
# (nvmlDeviceGetProcessUtilization). NVIDIA's release notes say nothing of it; NVIDIA's driver
# source does: from tag 570.86.15 of NVIDIA/open-gpu-kernel-modules (released 2025-01-27,
# developer.download.nvidia.com/compute/nvidia-driver/redist/redistrib_570.86.15.json), the RM
# translates each sample's process id with osFindNsPid
# (src/nvidia/src/kernel/gpu/perf/kern_perf_ctrl.c); 565.77, the release before, does not. Before
# it, a container sees host pids, which never match its own: every kernel would look idle.
NAMESPACED_UTILIZATION_DRIVER = (570, 86, 15)

MAX_DEPTH = 4096  # guards against a corrupt ancestry; real trees are shallow

ParentOf = Callable[[int], "int | None"]


@dataclass(frozen=True)
class Owner:
    """Which of our processes a GPU process belongs to."""

    kernel_pid: int | None  # the nearest kernel ancestor (or itself), None if none
    in_server: bool  # the server process or one of its descendants


def parse_driver_version(text: str) -> tuple[int, ...]:
    """'565.57.01' -> (565, 57, 1); unparseable parts stop the tuple."""
    numbers = []
    for part in text.strip().split("."):
        match = re.match(r"\d+", part)
        if match is None:
            break
        numbers.append(int(match.group()))
    return tuple(numbers)


def per_process_support(driver_version: str | None, in_container: bool) -> tuple[bool, str | None]:
    """Whether NVML's per-process memory can be attributed here, and why not if it cannot."""
    if not in_container or driver_version is None:
        return True, None
    if parse_driver_version(driver_version) >= NAMESPACED_MEMORY_DRIVER:
        return True, None
    return False, (
        f"NVIDIA driver {driver_version} does not report per-process GPU memory inside "
        "containers (driver 565 or newer does); per-kernel figures are unknown"
    )


def per_process_utilization_support(driver_version: str | None, in_container: bool) -> tuple[bool, str | None]:
    """Whether NVML's per-process utilisation samples name this container's pids, and why not if not."""
    if not in_container or driver_version is None:
        return True, None
    if parse_driver_version(driver_version) >= NAMESPACED_UTILIZATION_DRIVER:
        return True, None
    return False, (
        f"NVIDIA driver {driver_version} gives host process ids in GPU utilisation samples inside "
        "containers (driver 570.86.15 or newer gives the container's)"
    )


def find_owners(pids: Iterable[int], kernel_pids: set[int], server_pid: int, parent_of: ParentOf) -> dict[int, Owner]:
    """Walk each pid's ancestry (memoised) up to a kernel, the server, or the root."""
    chains: dict[int, Owner] = {}

    def owner(pid: int) -> Owner:
        path: list[int] = []
        current: int | None = pid
        found = Owner(kernel_pid=None, in_server=False)
        while current is not None and current > 0 and len(path) < MAX_DEPTH:
            if current in chains:
                found = chains[current]
                break
            if current == server_pid:
                found = Owner(kernel_pid=None, in_server=True)
                break
            path.append(current)
            current = parent_of(current)
        # Fill the memo from the top down, so a kernel found on the way is the nearest one.
        for step in reversed(path):
            kernel = step if step in kernel_pids else found.kernel_pid
            found = Owner(kernel_pid=kernel, in_server=found.in_server)
            chains[step] = found
        return found

    return {pid: owner(pid) for pid in pids}


def sum_memory(processes: Sequence[GpuProcess]) -> int | None:
    """Total of known memory; None if any process's memory is unknown."""
    total = 0
    for process in processes:
        if process.memory_bytes is None:
            return None
        total += process.memory_bytes
    return total


def _is_ours(owner: Owner) -> bool:
    return owner.in_server or owner.kernel_pid is not None


@dataclass(frozen=True)
class Attribution:
    per_kernel: Mapping[int, int | None]  # kernel pid -> bytes (None = unknown)
    server_bytes: int | None
    other_tenants_bytes: int | None
    reason: str | None


def attribute(
    *,
    processes: Sequence[GpuProcess],
    device_used_bytes: int,
    owners: Mapping[int, Owner],
    kernel_pids: Iterable[int],
    per_process: bool,
    devices_are_ours: bool,
) -> Attribution:
    """Per-kernel, server and other-tenant memory from NVML's process list.

    ``devices_are_ours``: the visible devices belong to this server alone (MIG, whole GPUs),
    so device usage is the server's usage even when per-process memory is unknown.
    """
    kernel_pids = list(kernel_pids)
    if not per_process:
        server = device_used_bytes if devices_are_ours else None
        return Attribution(dict.fromkeys(kernel_pids), server, None, None)
    nobody = Owner(kernel_pid=None, in_server=False)
    ours = [p for p in processes if _is_ours(owners.get(p.pid, nobody))]
    per_kernel = {pid: sum_memory([p for p in ours if owners[p.pid].kernel_pid == pid]) for pid in kernel_pids}
    server = sum_memory(ours)
    reason = None
    if server is None:
        reason = "NVML gives no memory figure for some of this server's GPU processes"
    others = None if server is None else max(0, device_used_bytes - server)
    return Attribution(per_kernel, server, others, reason)
