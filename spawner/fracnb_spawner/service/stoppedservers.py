"""A stop's record as the service keeps it and as ``api/me`` answers it (``stopped``).

Each stop is kept in the session history (:mod:`fracnb_spawner.history.stopnotices`, table ``fracnb_stops``),
with what its hibernation saved, so that a restart of the service forgets none.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from datetime import timezone
from typing import Any

from fracnb_spawner.culling import isoformat
from fracnb_spawner.history.stopnotices import SERVICE_REASONS, StopNotice


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
    """``api/me``'s ``stopped``: the last stop of each of the user's servers that is not running now, when the
    service made it (a cull; a stop on request has no reason the meter knows, and shows nothing there)."""
    return {
        notice.server: stop_json(notice)
        for notice in stops
        if notice.server not in running and notice.reason in SERVICE_REASONS
    }
