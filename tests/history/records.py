"""Session reports and records as literal data, for the history tests."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

GIB = 1 << 30


def report(
    session_id: str = "a" * 32,
    *,
    server_name: str = "",
    started: str = "2026-11-01T10:00:00Z",
    reported: str = "2026-11-01T11:00:00Z",
    ended: str | None = None,
    **figures: Any,
) -> dict[str, Any]:
    """A session report of schemas/session-report.schema.json; ``figures`` override the statistics."""
    return {
        "session_id": session_id,
        "server_name": server_name,
        "profile": "a100",
        "choice": "size=half",
        "fraction": 0.5,
        "budget_bytes": 40 * GIB,
        "backend": "time-slicing",
        "started_at": started,
        "ended_at": ended,
        "reported_at": reported,
        "peak_bytes": 6 * GIB,
        "observed_seconds": 3600.0,
        "seconds_above_80": 0.0,
        "seconds_above_95": 0.0,
        "oom_events": 0,
        "busy_share": 0.25,
        **figures,
    }


def gpu_unused(seconds: int | None = 3600, **fields: Any) -> dict[str, Any]:
    """A session report's gpu_unused (gpu-unused.schema.json#/$defs/serverReport)."""
    return {
        "seconds": seconds,
        "reason": None if seconds is not None else "MIG instances have no per-process GPU utilisation.",
        "measured_at": "2026-11-01T10:59:55Z",
        "window_seconds": 30,
        "gpu_memory_bytes": 18 * GIB,
        "busy_kernels": 0,
        **fields,
    }


def row(user: str, number: int, start: datetime, **figures: Any) -> dict[str, Any]:
    """A prepared database row (store.insert_many), ``number`` making its session id unique."""
    return {
        "session_id": f"{number:032x}",
        "user_name": user,
        "server_name": "",
        "profile": "a100",
        "choice": "size=half",
        "fraction": 0.5,
        "budget_bytes": 40 * GIB,
        "backend": "time-slicing",
        "started_at": start,
        "ended_at": start + timedelta(hours=1),
        "reported_at": start + timedelta(hours=1),
        "peak_bytes": 6 * GIB,
        "observed_seconds": 3600.0,
        "seconds_above_80": 0.0,
        "seconds_above_95": 0.0,
        "oom_events": 0,
        "busy_share": 0.25,
        **figures,
    }
