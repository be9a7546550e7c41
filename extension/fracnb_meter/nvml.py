"""Read devices and GPU processes from NVML (through nvidia-ml-py, imported as pynvml).

Thin I/O only: every NVML call of the meter is in this module. Any NVML failure turns
into a reading with ``available=False`` and a sentence saying why; nothing raises.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class Gpu:
    """One leaf device this server can use: a whole GPU or a MIG instance."""

    index: int
    name: str
    uuid: str
    memory_total_bytes: int
    memory_used_bytes: int
    utilization_percent: int | None
    mig: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "memory_total_bytes": self.memory_total_bytes,
            "memory_used_bytes": self.memory_used_bytes,
            "utilization_percent": self.utilization_percent,
            "mig": self.mig,
        }


@dataclass(frozen=True)
class GpuProcess:
    """A process NVML lists on a leaf device; memory None when the driver does not say."""

    pid: int
    memory_bytes: int | None
    gpu_uuid: str


@dataclass(frozen=True)
class GpuReading:
    available: bool
    reason: str | None = None
    driver_version: str | None = None
    simulated: bool = False
    gpus: tuple[Gpu, ...] = ()
    processes: tuple[GpuProcess, ...] = field(default_factory=tuple)
    # Pids that used the GPU (SMs, memory bandwidth, encoder or decoder) since ``utilization_since``
    # (NVML's per-process utilisation samples); None where some device gives none (MIG, errors, old drivers).
    busy_pids: frozenset[int] | None = None
    utilization_stamp: int = 0  # microseconds: the newest sample seen, for the next read's "since"
    utilization_reason: str | None = None  # why busy_pids is None, when it was asked for


def unavailable(reason: str) -> GpuReading:
    return GpuReading(available=False, reason=reason)


def describe_failure(nvml: ModuleType, error: Exception) -> str:
    """A sentence for the user about why NVML could not be read."""
    if isinstance(error, nvml.NVMLError_LibraryNotFound):
        return "No NVIDIA driver library (libnvidia-ml.so.1) on this machine: no GPU visible."
    if isinstance(error, nvml.NVMLError_DriverNotLoaded):
        return "The NVIDIA driver is not loaded: no GPU visible."
    if isinstance(error, nvml.NVMLError_FunctionNotFound):
        return "The NVIDIA driver is too old for this meter (an NVML function is missing)."
    return f"NVML failed ({error}): GPU usage cannot be read right now."


def _text(value: str | bytes) -> str:
    # nvidia-ml-py 12.x returned bytes where 13.x returns str.
    return value.decode() if isinstance(value, bytes) else value


def _utilization(nvml: ModuleType, handle: Any) -> int | None:
    try:
        return int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    except nvml.NVMLError_NotSupported:  # MIG instances have no utilisation counters
        return None


def _processes(nvml: ModuleType, handle: Any, uuid: str) -> list[GpuProcess]:
    seen: dict[int, GpuProcess] = {}
    listings = [nvml.nvmlDeviceGetComputeRunningProcesses(handle)]
    with contextlib.suppress(nvml.NVMLError_NotSupported):
        listings.append(nvml.nvmlDeviceGetGraphicsRunningProcesses(handle))
    for listing in listings:
        for info in listing:
            memory = info.usedGpuMemory  # pynvml maps "not available" to None
            seen.setdefault(int(info.pid), GpuProcess(int(info.pid), memory, uuid))
    return list(seen.values())


def _memory(nvml: ModuleType, handle: Any) -> tuple[int, int]:
    info = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
    return int(info.total), int(info.used)


def _leaf(nvml: ModuleType, handle: Any, index: int, mig: dict[str, Any] | None) -> Gpu:
    total, used = _memory(nvml, handle)
    return Gpu(
        index=index,
        name=_text(nvml.nvmlDeviceGetName(handle)),
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        memory_total_bytes=total,
        memory_used_bytes=used,
        utilization_percent=None if mig else _utilization(nvml, handle),
        mig=mig,
    )


def _mig_handles(nvml: ModuleType, handle: Any) -> list[Any] | None:
    """MIG instance handles of a device in MIG mode; None when MIG is off or unsupported."""
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError_NotSupported:
        return None
    if current != nvml.NVML_DEVICE_MIG_ENABLE:
        return None
    handles = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            handles.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
        except nvml.NVMLError_NotFound:  # empty slots may sit between used ones
            continue
    return handles


MIG_NO_SAMPLES = "MIG instances have no per-process GPU utilisation."
NO_SAMPLES = "This GPU or its driver gives no per-process GPU utilisation."


@dataclass(frozen=True)
class Utilization:
    """Pids that used the GPU in samples newer than a stamp; None with a reason where that is unknown."""

    busy_pids: frozenset[int] | None
    stamp: int  # microseconds: the newest sample seen
    reason: str | None = None


def _busy_pids(nvml: ModuleType, handle: Any, since: int) -> Utilization:
    """Pids that worked in the samples newer than ``since`` (µs), and the newest stamp."""
    try:
        samples = nvml.nvmlDeviceGetProcessUtilization(handle, since)
    except nvml.NVMLError_NotFound:  # no sample is newer: nothing ran
        return Utilization(frozenset(), since)
    except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
        return Utilization(None, since, NO_SAMPLES)
    except nvml.NVMLError as error:  # unknown work, but the memory figures still stand
        return Utilization(None, since, describe_failure(nvml, error))
    newest = max((int(s.timeStamp) for s in samples), default=since)
    return Utilization(frozenset(int(s.pid) for s in samples if _worked(s)), newest)


def _worked(sample: Any) -> bool:
    # The driver lists only processes with some non-zero utilisation; a copy shows as memory only.
    return any(int(getattr(sample, engine)) > 0 for engine in ("smUtil", "memUtil", "encUtil", "decUtil"))


def read_utilization(nvml: ModuleType, since: int) -> Utilization:
    """Busy pids over every device and the newest stamp; None (and why) when any device gives no
    samples, since work there would go unseen."""
    busy: set[int] = set()
    newest, reason = since, None
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        if _mig_handles(nvml, handle) is not None:
            reason = reason or MIG_NO_SAMPLES
            continue
        found = _busy_pids(nvml, handle, since)
        newest = max(newest, found.stamp)
        reason = reason or found.reason
        busy |= found.busy_pids or set()
    return Utilization(None if reason else frozenset(busy), newest, reason)


def _read_device(nvml: ModuleType, index: int) -> tuple[list[Gpu], list[GpuProcess]]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    mig_handles = _mig_handles(nvml, handle)
    if mig_handles is None:
        gpu = _leaf(nvml, handle, index, None)
        return [gpu], _processes(nvml, handle, gpu.uuid)
    parent_uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    gpus, processes = [], []
    for mig_handle in mig_handles:
        mig = {
            "gpu_instance_id": int(nvml.nvmlDeviceGetGpuInstanceId(mig_handle)),
            "parent_uuid": parent_uuid,
        }
        gpu = _leaf(nvml, mig_handle, index, mig)
        gpus.append(gpu)
        processes.extend(_processes(nvml, mig_handle, gpu.uuid))
    return gpus, processes


def is_simulated(nvml: ModuleType) -> bool:
    """True when the loaded libnvidia-ml is the project's fake (it exports fakenvml_version)."""
    library = getattr(nvml, "nvmlLib", None)
    return library is not None and hasattr(library, "fakenvml_version")


def read_devices(nvml: ModuleType, utilization_since: int | None = None) -> GpuReading:
    """Read every leaf device and its processes; NVML must be initialised by the caller.

    With ``utilization_since`` (µs, 0 for all NVML keeps), also which pids used the GPU since then.
    """
    driver = _text(nvml.nvmlSystemGetDriverVersion())
    gpus: list[Gpu] = []
    processes: list[GpuProcess] = []
    for index in range(nvml.nvmlDeviceGetCount()):
        device_gpus, device_processes = _read_device(nvml, index)
        gpus.extend(device_gpus)
        processes.extend(device_processes)
    if not gpus:
        return GpuReading(available=False, reason="No GPU is visible to this server.")
    utilization = Utilization(None, 0)
    if utilization_since is not None:
        utilization = read_utilization(nvml, utilization_since)
    return GpuReading(
        available=True,
        driver_version=driver,
        simulated=is_simulated(nvml),
        gpus=tuple(gpus),
        processes=tuple(processes),
        busy_pids=utilization.busy_pids,
        utilization_stamp=utilization.stamp,
        utilization_reason=utilization.reason,
    )
