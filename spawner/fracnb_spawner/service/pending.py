"""Session reports the database could not take, kept until it answers again.

A notebook posts its session's whole report every few minutes and once more when its server stops
(:mod:`fracnb_meter.sessionreport`); that last one is sent once. While the session database is away
(PostgreSQL restarting, an SQLite file locked by a backup), the service keeps each report in memory
(one per session: the newest), answers 202, and stores them when the database answers again. Storing
is idempotent (a report older than the stored one changes nothing; the same one again adds nothing),
so a report delivered twice is counted once, and the metrics count what each store added.

Kept reports live in the service's memory: a service restarted during the outage loses them (the
notebooks' next periodic reports bring their sessions back, except final reports). At most
``limit`` sessions are kept; past that the oldest report goes, and says so in the log.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

log = logging.getLogger("fracnb.service")

LIMIT = 10_000
Store = Callable[[str, Mapping[str, Any]], Awaitable[Any]]


class PendingReports:
    """Reports by (user, session id), oldest first."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._reports: OrderedDict[tuple[str, str], tuple[str, Mapping[str, Any]]] = OrderedDict()
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._reports)

    def keep(self, user: str, report: Mapping[str, Any]) -> None:
        """Keep ``report`` unless a newer one of the same session is kept already."""
        key = (user, str(report["session_id"]))
        kept = self._reports.get(key)
        if kept is not None and str(kept[1]["reported_at"]) > str(report["reported_at"]):
            return
        self._reports[key] = (user, report)
        self._reports.move_to_end(key)
        while len(self._reports) > self.limit:
            (old_user, old_session), _ = self._reports.popitem(last=False)
            self.dropped += 1
            log.error("Dropped the kept session report %s of %s: more than %d kept", old_session, old_user, self.limit)

    async def flush(self, store: Store) -> int:
        """Store kept reports, oldest first, until the database fails again; the number stored."""
        stored = 0
        while self._reports:
            key, (user, report) = next(iter(self._reports.items()))
            try:
                await store(user, report)
            except SQLAlchemyError:
                return stored  # still away: the next flush tries again
            except Exception:
                log.exception("Dropped the kept session report %s of %s: it cannot be stored", key[1], user)
            # A newer report of the session may have been kept while this one was stored.
            if self._reports.get(key, (None, None))[1] is report:
                del self._reports[key]
            stored += 1
        return stored
