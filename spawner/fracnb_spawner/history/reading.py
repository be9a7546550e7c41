"""What the hub reads of the session history (one user's newest sessions and newest stop), and the one
thing it writes there: the record of a stop someone asked for (history/hubstopnotices.py).

The database is the fracnb service's (it creates and migrates it); the hub goes through this one
class, which keeps one engine per database URL for the hub process, and never creates it.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from fracnb_spawner.history.db import make_engine
from fracnb_spawner.history.stopnotices import StopNotice, newest_stop, record_stop
from fracnb_spawner.history.store import busy_shares, sessions_of

HISTORY_LIMIT = 50  # the newest sessions of a user the advice looks at


class HistoryReader:
    """The hub's access to the session history, one engine per database URL."""

    def __init__(self) -> None:
        self._databases: dict[str, sessionmaker[Session]] = {}

    def sessions(self, url: str, user: str, limit: int = HISTORY_LIMIT) -> list[dict[str, Any]]:
        """The user's newest sessions; [] while an SQLite history does not exist (reading must not create it)."""
        database = self._database(url)
        return [] if database is None else sessions_of(database, user, limit=limit)

    def busy_shares(self, url: str, users: list[str], since: datetime) -> tuple[dict[str, float], float | None]:
        """The users' shares of busy time since ``since``, and every user's (store.busy_shares); none without one."""
        database = self._database(url)
        return ({}, None) if database is None else busy_shares(database, users, since=since)

    def newest_stop(self, url: str, user: str, now: datetime, server: str | None = None) -> StopNotice | None:
        """The user's newest stop (of ``server``, when given) (history/stopnotices.py); None without one."""
        database = self._database(url)
        return None if database is None else newest_stop(database, user, now=now, server=server)

    def record_stop(self, url: str, notice: StopNotice) -> bool:
        """Keep ``notice`` beside the service's stops; False while an SQLite history does not exist."""
        database = self._database(url)
        if database is None:
            return False
        record_stop(database, notice)
        return True

    def _database(self, url: str) -> sessionmaker[Session] | None:
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite" and not (parsed.database and Path(parsed.database).is_file()):
            return None
        if url not in self._databases:
            self._databases[url] = sessionmaker(make_engine(url), expire_on_commit=False)
        return self._databases[url]
