"""Assemble the JSON document of ``GET {base_url}fracnb/api/usage`` from plain inputs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .attribution import ParentOf, attribute, find_owners, per_process_support
from .contract import Budget
from .gpuunused import GpuUnused, not_measured
from .nvml import GpuReading


@dataclass(frozen=True)
class KernelInfo:
    """A running kernel of this server, as the kernel and session managers know it."""

    id: str
    name: str
    session_name: str | None
    path: str | None
    execution_state: str | None
    pid: int | None  # None for kernels that are not local processes


def _kernel_json(kernel: KernelInfo, memory: int | None, gpu_unused: GpuUnused | None) -> dict[str, Any]:
    return {
        "id": kernel.id,
        "name": kernel.name,
        "session_name": kernel.session_name,
        "path": kernel.path,
        "execution_state": kernel.execution_state,
        "pid": kernel.pid,
        "gpu_memory_bytes": memory,
        "gpu_unused": not_measured() if gpu_unused is None else gpu_unused.kernel_json(kernel.id),
    }


def _join(*reasons: str | None) -> str | None:
    present = [r for r in reasons if r]
    return "; ".join(present) + "." if present else None


def build_usage(
    *,
    reading: GpuReading,
    kernels: Sequence[KernelInfo],
    server_pid: int,
    parent_of: ParentOf,
    budget: Budget,
    budget_error: str | None,
    in_container: bool,
    sampled_at: datetime,
    gpu_unused: GpuUnused | None = None,
) -> dict[str, Any]:
    """The usage document; per-kernel memory is None wherever it cannot be known.

    ``gpu_unused``: the meter's GPU-unused counts (fracnb_meter.gpuunused); None: not measured.
    """
    document: dict[str, Any] = {
        "available": reading.available,
        "reason": reading.reason,
        "simulated": reading.simulated,
        "per_process_memory": False,
        "gpus": [gpu.as_json() for gpu in reading.gpus],
        "kernels": [_kernel_json(k, None, gpu_unused) for k in kernels],
        "server": {"gpu_memory_bytes": None},
        "other_tenants": {"gpu_memory_bytes": None},
        "budget": {**budget.as_json(), "error": budget_error},
        "quota": None,
        "cull": None,
        "history": None,
        "advice": None,
        "gpu_unused": not_measured() if gpu_unused is None else gpu_unused.server_json(),
        "hibernation": None,
        "hibernation_stop": None,
        "stop_notice": None,
        "sampled_at": sampled_at.isoformat(timespec="microseconds"),
    }
    if not reading.available:
        return document
    per_process, support_reason = per_process_support(reading.driver_version, in_container)
    local_pids = {k.pid for k in kernels if k.pid is not None}
    owners = find_owners({p.pid for p in reading.processes}, local_pids, server_pid, parent_of) if per_process else {}
    result = attribute(
        processes=reading.processes,
        device_used_bytes=sum(gpu.memory_used_bytes for gpu in reading.gpus),
        owners=owners,
        kernel_pids=local_pids,
        per_process=per_process,
        devices_are_ours=budget.isolation == "hard",
    )
    document["per_process_memory"] = per_process
    document["reason"] = _join(support_reason, result.reason)
    document["kernels"] = [
        _kernel_json(k, None if k.pid is None else result.per_kernel.get(k.pid), gpu_unused) for k in kernels
    ]
    document["server"] = {"gpu_memory_bytes": result.server_bytes}
    document["other_tenants"] = {"gpu_memory_bytes": result.other_tenants_bytes}
    return document
