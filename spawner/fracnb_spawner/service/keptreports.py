"""Session reports the database could not take, kept until it answers again.

A notebook posts its session's whole report every few minutes and once more when its server stops
(:mod:`fracnb_meter.sessionreport`); that last one is sent once. While the session database is away
(PostgreSQL restarting, an SQLite file locked by a backup), the service keeps each report in memory
(one per session: the newest), answers 202, and stores them when the database answers again. Storing
is idempotent (a report older than the stored one changes nothing; the same one again adds nothing),
so a report delivered twice is counted once, and the metrics count what each store added.

Kept reports are also appended to a file (``c.FracnbService.kept_reports_file``, one JSON line each,
readable by the service's user only) and read back when the service starts: a service restarted
during the outage stores them too, final reports included. The file is emptied once everything is
stored, and rewritten with what is still kept when a flush stops half-way. At most ``limit`` sessions
are kept; past that the oldest report goes, and says so in the log.
"""

from __future__ import annotations

import json
import logging
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

log = logging.getLogger("fracnb.service")

LIMIT = 10_000
Store = Callable[[str, Mapping[str, Any]], Awaitable[Any]]


class PendingReports:
    """Reports by (user, session id), oldest first."""

    def __init__(self, limit: int = LIMIT, path: Path | None = None) -> None:
        self.limit = limit
        self._reports: OrderedDict[tuple[str, str], tuple[str, Mapping[str, Any]]] = OrderedDict()
        self.dropped = 0
        self.path = None  # None while reading the file back: what it holds is not written again
        for user, report in _read(path):
            self.keep(user, report)
        self.path = path
        if self._reports:
            log.info("Read %d session reports kept while the database was away from %s", len(self._reports), path)

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
        if self.path is not None:
            _append(self.path, [(user, report)])
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
                break  # still away: the next flush tries again
            except Exception:
                log.exception("Dropped the kept session report %s of %s: it cannot be stored", key[1], user)
            # A newer report of the session may have been kept while this one was stored.
            if self._reports.get(key, (None, None))[1] is report:
                del self._reports[key]
            stored += 1
        if stored:
            self._rewrite()
        return stored

    def _rewrite(self) -> None:
        """The file holds what is still kept: nothing once all is stored (it is removed then)."""
        if self.path is None:
            return
        if not self._reports:
            self.path.unlink(missing_ok=True)
            return
        partial = self.path.with_name(self.path.name + ".partial")  # replaced at once: a crash loses nothing
        try:
            partial.unlink(missing_ok=True)
            _append(partial, list(self._reports.values()))
            os.replace(partial, self.path)
        except OSError as error:  # the old file stays: it holds these reports and some already stored
            log.error("Could not rewrite the kept session reports in %s: %s", self.path, error)


def _append(path: Path, reports: list[tuple[str, Mapping[str, Any]]]) -> None:
    lines = "".join(json.dumps({"user": user, "report": report}) + "\n" for user, report in reports)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(descriptor, "a", encoding="utf-8") as file:
            file.write(lines)
    except OSError as error:  # kept in memory all the same
        log.error("Could not write the kept session reports to %s: %s", path, error)


def _read(path: Path | None) -> list[tuple[str, Mapping[str, Any]]]:
    """The reports a file of kept reports holds; a line that is not one is skipped (a write cut short)."""
    if path is None or not path.is_file():
        return []
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            entry = json.loads(line)
            user, report = str(entry["user"]), dict(entry["report"])
            if "session_id" not in report or "reported_at" not in report:
                raise KeyError("session_id")
        except (ValueError, KeyError, TypeError):
            log.warning("Skipped line %d of %s: not a kept session report", number, path)
            continue
        found.append((user, report))
    return found
