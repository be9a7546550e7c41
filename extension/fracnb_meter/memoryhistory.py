"""A bounded history of GPU memory, for the meter's charts (pure, no I/O).

One series for the server and one per kernel, over the whole session (from the meter's start),
in at most ``capacity`` points each, whatever the session's length: each point summarises a
time bucket ``step_s`` seconds wide by its highest reading, and when a series would hold more
points than ``capacity`` its buckets double in width and neighbours merge, keeping the higher.
A week at 1 s readings thus takes the same memory as a minute, and a peak never falls out of
the chart; the series' exact peak and its latest reading are kept beside the points.

Kernels are known by id, which a kernel keeps when it restarts, so a restart continues its
series. A kernel shut down and replaced by a new one for the same notebook (same path)
continues the old kernel's series and names it in ``carried_from``; a kernel with no notebook
path starts afresh. The JSON shape is schemas/memory-history.schema.json.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

DEFAULT_CAPACITY = 120
DEFAULT_STEP_S = 1.0
KEEP_DEPARTED = 16  # series of shut-down kernels kept for a replacement to continue


@dataclass(frozen=True)
class Point:
    """A reading: ``bytes`` of GPU memory ``at_s`` seconds after the history began."""

    at_s: float
    bytes: int

    def as_json(self) -> dict[str, Any]:
        return {"at_s": round(self.at_s, 3), "bytes": self.bytes}


def compact(points: Sequence[Point], step_s: float) -> list[Point]:
    """Merge points into buckets ``step_s`` wide, each kept by its highest (earliest on ties)."""
    merged: list[Point] = []
    for point in points:
        if merged and _bucket(merged[-1].at_s, step_s) == _bucket(point.at_s, step_s):
            if point.bytes > merged[-1].bytes:
                merged[-1] = point
        else:
            merged.append(point)
    return merged


def _bucket(at_s: float, step_s: float) -> int:
    return int(at_s // step_s)


@dataclass
class Series:
    """GPU memory over time, in at most ``capacity`` points."""

    capacity: int = DEFAULT_CAPACITY
    step_s: float = DEFAULT_STEP_S
    points: list[Point] = field(default_factory=list)
    peak: Point | None = None
    latest: Point | None = None
    # The points as JSON, kept in step with them: the usage endpoint shows them on every poll.
    _points_json: list[dict[str, Any]] = field(default_factory=list, repr=False, compare=False)

    def add(self, at_s: float, value: int) -> None:
        point = Point(at_s, value)
        self.latest = point
        if self.peak is None or value > self.peak.bytes:
            self.peak = point
        last = self.points[-1] if self.points else None
        if last is not None and _bucket(last.at_s, self.step_s) == _bucket(at_s, self.step_s):
            if value > last.bytes:
                self.points[-1], self._points_json[-1] = point, point.as_json()
            return
        self.points.append(point)
        self._points_json.append(point.as_json())
        if len(self.points) > self.capacity:
            while len(self.points) > self.capacity:
                self.step_s *= 2
                self.points = compact(self.points, self.step_s)
            self._points_json = [kept.as_json() for kept in self.points]

    def as_json(self) -> dict[str, Any]:
        return {
            "step_s": self.step_s,
            "peak": None if self.peak is None else self.peak.as_json(),
            "latest": None if self.latest is None else self.latest.as_json(),
            "points": list(self._points_json),
        }


@dataclass(frozen=True)
class KernelSample:
    """One kernel in one reading; ``memory_bytes`` None when the driver cannot tell."""

    id: str
    path: str | None
    memory_bytes: int | None


@dataclass
class KernelSeries:
    path: str | None
    series: Series
    carried_from: str | None = None


class MemoryHistory:
    """The server's and each kernel's series; :meth:`record` each reading, :meth:`as_json` to show."""

    def __init__(
        self,
        started_at: datetime,
        capacity: int = DEFAULT_CAPACITY,
        step_s: float = DEFAULT_STEP_S,
        keep_departed: int = KEEP_DEPARTED,
    ) -> None:
        if capacity < 2 or step_s <= 0:
            raise ValueError(f"a memory history needs capacity >= 2 and step_s > 0, not {capacity} and {step_s}")
        self.started_at = started_at
        self.capacity = capacity
        self.step_s = step_s
        self.keep_departed = keep_departed
        self.server = self._series()
        self.kernels: dict[str, KernelSeries] = {}  # running, in the order of the last reading
        self.departed: OrderedDict[str, KernelSeries] = OrderedDict()  # by kernel id, oldest first
        self.now_s = 0.0

    def _series(self) -> Series:
        return Series(capacity=self.capacity, step_s=self.step_s)

    def record(self, at_s: float, server_bytes: int | None, kernels: Sequence[KernelSample]) -> None:
        """One reading, ``at_s`` seconds after the history began; unknown figures add no point."""
        self.now_s = max(self.now_s, at_s)
        if server_bytes is not None:
            self.server.add(at_s, server_bytes)
        present = {kernel.id for kernel in kernels}
        for kernel_id, gone in self.kernels.items():
            if kernel_id not in present:
                self.departed[kernel_id] = gone  # first, so a replacement in this reading finds it
        running = {kernel.id: self._series_for(kernel) for kernel in kernels}
        while len(self.departed) > self.keep_departed:
            self.departed.popitem(last=False)
        self.kernels = running
        for kernel in kernels:
            if kernel.memory_bytes is not None:
                running[kernel.id].series.add(at_s, kernel.memory_bytes)

    def _series_for(self, kernel: KernelSample) -> KernelSeries:
        known = self.kernels.get(kernel.id) or self.departed.pop(kernel.id, None)
        if known is not None and (known.path is not None or kernel.path is None):
            known.path = kernel.path
            return known
        # A new kernel, or one first read before jupyter_server recorded its notebook's path
        # (it adds the kernel before the session): continue a departed kernel of that notebook.
        carried = self._carry(kernel.path)
        if carried is None:
            if known is None:
                return KernelSeries(kernel.path, self._series())
            known.path = kernel.path
            return known
        if known is not None:
            for point in known.series.points:
                carried.series.add(point.at_s, point.bytes)
        return carried

    def _carry(self, path: str | None) -> KernelSeries | None:
        if path is None:
            return None
        for old_id, old in reversed(self.departed.items()):
            if old.path == path:
                del self.departed[old_id]
                return KernelSeries(path, old.series, carried_from=old_id)
        return None

    def as_json(self) -> dict[str, Any]:
        """schemas/memory-history.schema.json: the running kernels' series and the server's."""
        return {
            "started_at": self.started_at.isoformat(timespec="microseconds"),
            "now_s": round(self.now_s, 3),
            "capacity": self.capacity,
            "server": self.server.as_json(),
            "kernels": [
                {"id": kernel_id, "path": kept.path, "carried_from": kept.carried_from, "series": kept.series.as_json()}
                for kernel_id, kept in self.kernels.items()
            ],
        }


def record_usage(history: MemoryHistory, document: dict[str, Any], at_s: float) -> dict[str, Any]:
    """Record a usage document's figures (usage.schema.json) and return the history to show beside them."""
    history.record(
        at_s,
        document["server"]["gpu_memory_bytes"],
        [KernelSample(k["id"], k["path"], k["gpu_memory_bytes"]) for k in document["kernels"]],
    )
    return history.as_json()
