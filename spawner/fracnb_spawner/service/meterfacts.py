"""What the servers' notebooks tell the service, kept in its memory: their last use and their GPU-unused time.

- **Last use** (``POST api/activity``, :mod:`.activity`): the newest moment someone used the server
  (a cell run, typing, a save, a kernel computing), as the notebook's meter sees it. The hub's own
  ``last_activity`` also counts an open JupyterLab tab's polling (through the proxy and the
  server's API), so where the meter reports use, the idle deadline counts from that instead.
- **GPU-unused time** (the session reports' ``gpu_unused``, :mod:`.api.sessions`): for the GPU-unused
  timeouts (:mod:`fracnb_spawner.culling`). A missing field, ``seconds: null``, a report older than
  two report intervals, or one from before the server's start is unknown, never unused; the count
  is never extrapolated past the moment the meter measured it.

Both are as of the last report; after a restart of the service both are unknown until the next
report, so servers fall back to the hub's activity and to no GPU-unused deadline: never stopped
sooner for it. Reports come from the user's own server: they can shorten its life, never lengthen
it past what the hub's activity allows (a reported time is never later than its arrival).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

from fracnb_spawner.culling import GpuUnused, ServerActivity, parse_timestamp
from fracnb_spawner.service.metrics import CullMetrics

Who = tuple[str, str]  # (user, server name)
USE_FRESH_SECONDS = 600.0  # the meter posts its last use at least every 5 minutes (FracnbMeter.activity_interval)


@dataclass(frozen=True)
class _Unused:
    session_id: str
    profile: str
    fraction: Fraction
    seconds: float | None
    measured_at: datetime  # on the service's clock
    busy_kernels: int
    gpu_memory_bytes: int | None


def unused_of(report: Mapping[str, Any], received_at: datetime) -> _Unused | None:
    """The GPU-unused part of a session report (session-report.schema.json), with its moment moved to the
    service's clock (its age when sent, from the meter's own two clocks, before its arrival); None without it."""
    field = report.get("gpu_unused")
    if not field:
        return None
    measured, reported = parse_timestamp(field["measured_at"]), parse_timestamp(report["reported_at"])
    if measured is None or reported is None:
        return None
    age = max((reported - measured).total_seconds(), 0.0)
    fraction = report.get("fraction")
    return _Unused(
        session_id=report["session_id"],
        profile=report.get("profile") or "",
        fraction=Fraction(str(fraction)) if fraction else Fraction(0),
        seconds=field["seconds"],
        measured_at=received_at - timedelta(seconds=age),
        busy_kernels=field["busy_kernels"],
        gpu_memory_bytes=field["gpu_memory_bytes"],
    )


def unused_seconds_between(before: _Unused | None, after: _Unused) -> float:
    """Known GPU-unused seconds between two reports of one session (for the GPU-unused hours)."""
    if before is None or before.session_id != after.session_id or before.seconds is None or after.seconds is None:
        return 0.0
    if after.seconds >= before.seconds:
        return after.seconds - before.seconds
    # Reset by GPU work in between: what was counted since.
    return min(after.seconds, max((after.measured_at - before.measured_at).total_seconds(), 0.0))


class MeterFacts:
    """The latest report of each server; ``report_interval`` is the notebooks' session report interval."""

    def __init__(self, report_interval: float, metrics: CullMetrics | None = None) -> None:
        self.report_interval = report_interval
        self.metrics = metrics
        self._unused: dict[Who, _Unused] = {}
        self._uses: dict[Who, tuple[datetime, datetime]] = {}  # last use, when it arrived

    # ---- what arrives ----------------------------------------------------------------------

    def record_report(self, who: Who, report: Mapping[str, Any], received_at: datetime) -> None:
        """A session report: keep its GPU-unused time; the last one of a session (``ended_at``) forgets it."""
        if report.get("ended_at"):
            self._unused.pop(who, None)
            return
        unused = unused_of(report, received_at)
        if unused is None:
            self._unused.pop(who, None)
            return
        held = unused_seconds_between(self._unused.get(who), unused)
        if self.metrics is not None and held > 0 and unused.fraction > 0:
            self.metrics.record_gpu_unused(unused.profile, float(unused.fraction) * held / 3600)
        self._unused[who] = unused

    def record_use(self, who: Who, last_use: datetime, received_at: datetime) -> None:
        self._uses[who] = (min(last_use, received_at), received_at)

    def forget(self, who: Who) -> None:
        """The server stopped: what its notebook said no longer holds."""
        self._unused.pop(who, None)
        self._uses.pop(who, None)

    # ---- what the culler reads -------------------------------------------------------------

    def activity(self, who: Who, activity: ServerActivity, now: datetime) -> ServerActivity:
        """``activity`` with the notebook's last use as its last activity, where a fresh one of this server's
        session arrived."""
        found = self._uses.get(who)
        if found is None:
            return activity
        last_use, received_at = found
        fresh = (now - received_at).total_seconds() <= USE_FRESH_SECONDS
        if not fresh or (activity.started is not None and last_use < activity.started):
            return activity
        return replace(activity, last_activity=last_use)

    def busy(self, who: Who, now: datetime) -> bool:
        """Whether the server's fresh session report says a kernel runs a cell (unknown: False)."""
        unused = self._unused.get(who)
        fresh = unused is not None and (now - unused.measured_at).total_seconds() <= 2 * self.report_interval
        return bool(fresh and unused.busy_kernels > 0)

    def gpu_unused(self, who: Who, activity: ServerActivity, now: datetime) -> GpuUnused | None:
        """The server's GPU-unused time if known; None (unknown) otherwise."""
        unused = self._unused.get(who)
        if unused is None or unused.seconds is None:
            return None
        if (now - unused.measured_at).total_seconds() > 2 * self.report_interval:
            return None
        if activity.started is not None and unused.measured_at < activity.started:
            return None  # an earlier session of this server
        return GpuUnused(unused.seconds, unused.measured_at, unused.busy_kernels, unused.gpu_memory_bytes)
