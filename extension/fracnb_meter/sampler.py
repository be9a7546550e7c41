"""The one gate to NVML: initialises it lazily, and reads it at most once per floor interval.

Importing this module touches no NVML; the first ``read()`` loads the library. Callers
asking more often than the floor get the previous reading, so a busy front end (or many
browser tabs) cannot turn into NVML load.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import time
from collections.abc import Callable
from types import ModuleType

from .nvml import GpuReading, describe_failure, read_devices, unavailable

Clock = Callable[[], float]


def load_bindings() -> ModuleType | None:
    """nvidia-ml-py's module, or None when it is not installed (import name: pynvml)."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


class Sampler:
    """Caches NVML readings for ``floor_seconds``; thread-safe; never raises for NVML errors."""

    def __init__(
        self,
        floor_seconds: float,
        clock: Clock = time.monotonic,
        bindings: Callable[[], ModuleType | None] = load_bindings,
        *,
        utilization: bool = True,
    ) -> None:
        self.floor_seconds = floor_seconds
        self._clock = clock
        self._bindings = bindings
        self._lock = threading.Lock()
        self._initialised: ModuleType | None = None
        self._last: GpuReading | None = None
        self._last_at = 0.0
        self.reads = 0  # how many times NVML was actually read (for tests and benchmarks)
        # Per-process utilisation (for the session's busy share): samples newer than this (µs) are new.
        self._utilization_since: int | None = 0 if utilization else None

    def read(self) -> GpuReading:
        with self._lock:
            now = self._clock()
            if self._last is not None and now - self._last_at < self.floor_seconds:
                return self._last
            self._last = self._read_now()
            self._last_at = now
            self.reads += 1
            return self._last

    def _read_now(self) -> GpuReading:
        nvml = self._initialised or self._bindings()
        if nvml is None:
            return unavailable("nvidia-ml-py is not installed: GPU usage cannot be read.")
        try:
            if self._initialised is None:
                nvml.nvmlInit()
                self._initialised = nvml
            reading = read_devices(nvml, self._utilization_since)
            if self._utilization_since is not None:
                self._utilization_since = max(self._utilization_since, reading.utilization_stamp)
            return reading
        except nvml.NVMLError as error:
            self._reset(nvml)
            return unavailable(describe_failure(nvml, error))

    def _reset(self, nvml: ModuleType) -> None:
        # Start again from nvmlInit next time: the driver may have been reloaded.
        if self._initialised is not None:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()
        self._initialised = None

    def close(self) -> None:
        with self._lock:
            if self._initialised is not None:
                self._reset(self._initialised)
