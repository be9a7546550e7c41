"""Each server's last cull, with what its hibernation saved, for its user (``api/me``'s ``stopped``, the page).

Kept in the service's memory, bounded: the latest cull of each server, for the most recent servers;
a restart of the service forgets them (the notebook's own restore offer on the next start does not
depend on it).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container
from datetime import timezone
from typing import Any

from fracnb_spawner.culling import isoformat
from fracnb_spawner.hibernation.culled import metric_outcome
from fracnb_spawner.service.page import CullRecord

KEPT = 10_000


def stop_json(record: CullRecord) -> dict[str, Any]:
    """A ``stoppedServer`` of service-me.schema.json: when and why, and the hibernation's outcome."""
    hibernation = None
    if record.hibernation is not None:
        found = record.hibernation
        hibernation = {
            "outcome": metric_outcome(found),
            "problem": found.problem,
            "saved_bytes": found.report["saved_bytes"] if found.report else 0,
            "kernels": [dict(kernel) for kernel in found.kernels],
            "summary": record.hibernation_lines(timezone.utc),
        }
    return {"stopped_at": isoformat(record.when), "reason": record.reason, "hibernation": hibernation}


class LastStops:
    def __init__(self, kept: int = KEPT) -> None:
        self._by_user: dict[str, dict[str, CullRecord]] = {}
        self._order: OrderedDict[tuple[str, str], None] = OrderedDict()  # oldest first, for the bound
        self._kept = kept

    def add(self, record: CullRecord) -> None:
        key = (record.user, record.server)
        self._by_user.setdefault(record.user, {})[record.server] = record
        self._order.pop(key, None)
        self._order[key] = None
        while len(self._order) > self._kept:
            user, server = self._order.popitem(last=False)[0]
            servers = self._by_user[user]
            del servers[server]
            if not servers:
                del self._by_user[user]

    def of(self, user: str) -> list[CullRecord]:
        """The user's servers' last culls, newest first."""
        return sorted(self._by_user.get(user, {}).values(), key=lambda record: record.when, reverse=True)

    def of_user(self, user: str, running: Container[str]) -> dict[str, dict[str, Any]]:
        """``api/me``'s ``stopped``: the last cull of each of the user's servers that has not started since."""
        return {record.server: stop_json(record) for record in self.of(user) if record.server not in running}
