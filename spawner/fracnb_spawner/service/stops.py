"""A stop's record as the service keeps it and as ``api/me`` answers it (``stopped``).

Each stop is kept in the session history (:mod:`fracnb_spawner.history.stops`, table ``fracnb_stops``),
with what its hibernation saved, so that a restart of the service forgets none.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from datetime import timezone
from typing import Any

from fracnb_spawner.culling import isoformat
from fracnb_spawner.hibernation.client import Hibernation
from fracnb_spawner.hibernation.culled import metric_outcome
from fracnb_spawner.history.stops import StopNotice


def hibernation_json(hibernation: Hibernation) -> dict[str, Any]:
    """What a hibernation came to, as a stop's record keeps it (service-me.schema.json's ``hibernation``
    without its ``summary``)."""
    return {
        "outcome": metric_outcome(hibernation),
        "problem": hibernation.problem,
        "saved_bytes": hibernation.report["saved_bytes"] if hibernation.report else 0,
        "kernels": [dict(kernel) for kernel in hibernation.kernels],
    }


def stop_json(notice: StopNotice) -> dict[str, Any]:
    """A ``stoppedServer`` of service-me.schema.json: when and why, and what its hibernation saved."""
    hibernation = None
    if notice.hibernation is not None:
        hibernation = {**notice.hibernation, "summary": notice.hibernation_lines(timezone.utc)}
    stopped_at = notice.stopped_at if notice.stopped_at.tzinfo else notice.stopped_at.replace(tzinfo=timezone.utc)
    return {
        "stopped_at": isoformat(stopped_at),
        "reason": notice.reason,
        "hibernation": hibernation,
    }


def stopped_servers(stops: Iterable[StopNotice], running: Container[str]) -> dict[str, dict[str, Any]]:
    """``api/me``'s ``stopped``: the last stop of each of the user's servers that is not running now."""
    return {notice.server: stop_json(notice) for notice in stops if notice.server not in running}
