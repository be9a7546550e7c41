"""Prometheus metrics of the session history, in the service's registry (served at ``metrics``).

- ``fracnb_session_peak_budget_ratio{profile}``: each ended session's peak GPU memory over its budget;
- ``fracnb_gpu_hours_allocated_total{profile}`` and ``fracnb_gpu_hours_busy_total{profile}``: GPU
  fraction x hours observed, and the part of them the GPU was busy for the session's processes;
- the same two per profile and JupyterHub group (``fracnb_group_gpu_hours_*``); a user in two
  groups counts in both, a user in none under ``group=""``.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram

from fracnb_spawner.history.store import Stored

RATIO_BUCKETS = (0.1, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.8, 0.9, 0.95, 1.0, 1.25)
DATABASE_OPERATIONS = ("store", "read", "report", "advice", "purge", "record-stop")


class HistoryMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.peak_ratio = Histogram(
            "fracnb_session_peak_budget_ratio",
            "Peak GPU memory of ended sessions over their memory budget",
            ["profile"],
            buckets=RATIO_BUCKETS,
            registry=registry,
        )
        self.allocated = Counter(
            "fracnb_gpu_hours_allocated",
            "GPU fraction x hours of sessions observed by the meter",
            ["profile"],
            registry=registry,
        )
        self.busy = Counter(
            "fracnb_gpu_hours_busy",
            "GPU fraction x hours in which the GPU was busy for the sessions' processes",
            ["profile"],
            registry=registry,
        )
        self.group_allocated = Counter(
            "fracnb_group_gpu_hours_allocated",
            "GPU fraction x hours of sessions observed by the meter, by the user's groups",
            ["profile", "group"],
            registry=registry,
        )
        self.group_busy = Counter(
            "fracnb_group_gpu_hours_busy",
            "GPU fraction x hours in which the GPU was busy, by the user's groups",
            ["profile", "group"],
            registry=registry,
        )
        self.database_errors = Counter(
            "fracnb_session_database_errors",
            "Requests to the session history database that failed, by operation",
            ["operation"],
            registry=registry,
        )
        for operation in DATABASE_OPERATIONS:
            self.database_errors.labels(operation=operation)

    def record(self, stored: Stored, groups: Iterable[str] = ()) -> None:
        record = stored.record
        profile = record["profile"] or "unknown"
        fraction = record["fraction"] or 0.0
        allocated = fraction * stored.observed_added / 3600
        busy = fraction * stored.busy_added / 3600
        self.allocated.labels(profile).inc(allocated)
        self.busy.labels(profile).inc(busy)
        for group in sorted(set(groups)) or [""]:
            self.group_allocated.labels(profile, group).inc(allocated)
            self.group_busy.labels(profile, group).inc(busy)
        if stored.just_ended and record["peak_bytes"] is not None and record["budget_bytes"]:
            self.peak_ratio.labels(profile).observe(record["peak_bytes"] / record["budget_bytes"])
