"""The servers the fracnb service stopped, and the notice their users read afterwards.

The service records each stop (:func:`record_stop`) just before it asks the hub to stop the server,
in the session history's database (table ``fracnb_stops``). Wherever the user lands next, the notice
says why: the hub's pages (home, "Server not running", the spawn form: :func:`notice_html`, through
the hub's ``announcement`` template variable), the service's page, and JupyterLab's own notice for an
open tab, which words it the same way (extension/test-data/stop-notices.json holds both to it).

A notice is built from a :class:`StopNotice`; what it says comes from :func:`notice_sentences`, one
sentence per fact, so that more facts (what was saved) add sentences there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

from markupsafe import Markup
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from fracnb_spawner.common.clock import clock_text, duration_text
from fracnb_spawner.history.models import StopRecord

# What a stop keeps and loses (JupyterLab's notice says the same: extension/src/stopped.ts).
CONSEQUENCES = (
    "Your saved files are kept. Running kernels were shut down: their variables and anything not saved are lost."
)
NOTICE_DAYS = 7  # a stop older than this is not news any more


@dataclass(frozen=True)
class StopNotice:
    """One stop the service made: whose server, when, why, and the limit that applied."""

    user: str
    server: str
    stopped_at: datetime  # naive UTC, as stored
    reason: str  # culling.Reason: idle, demand, max-age
    limit_seconds: float | None = None  # the idle timeout or the maximum age
    details: Mapping[str, Any] = field(default_factory=dict)  # more facts for the notice, as stored (JSON)


def stop_phrase(reason: str, limit_seconds: float | None) -> str:
    """ "for being idle for 15 min", "at its maximum age of 8 h": why, after "was stopped"."""
    if reason == "idle":
        return f"for being idle for {duration_text(limit_seconds)}" if limit_seconds else "for being idle"
    if reason == "demand":
        return "for being idle while someone waited for a GPU"
    if reason == "max-age":
        return f"at its maximum age of {duration_text(limit_seconds)}" if limit_seconds else "at its maximum age"
    return ""


def notice_sentences(notice: StopNotice, zone: ZoneInfo | None = None) -> list[str]:
    """What the user reads: why and when the server was stopped, then what was kept and lost."""
    which = f"Your server {notice.server!r}" if notice.server else "Your server"
    why = stop_phrase(notice.reason, notice.limit_seconds)
    when = clock_text(notice.stopped_at, zone)
    return [f"{which} was stopped {why} (at {when}).".replace("  ", " "), CONSEQUENCES]


def notice_html(notice: StopNotice, start_url: str, zone: ZoneInfo | None = None) -> Markup:
    """The notice as a hub page shows it (in its announcement bar), with a link to start again."""
    return Markup(
        '<span class="fracnb-stopped" data-fracnb-stopped="{}">{} <a href="{}">Start it again</a>.</span>'
    ).format(notice.reason, " ".join(notice_sentences(notice, zone)), start_url)


# ---- the table ------------------------------------------------------------------------------------


def record_stop(db: sessionmaker[Session], notice: StopNotice) -> None:
    with db() as session:
        session.add(
            StopRecord(
                user_name=notice.user,
                server_name=notice.server,
                stopped_at=_naive(notice.stopped_at),
                reason=notice.reason,
                limit_seconds=notice.limit_seconds,
                details=json.dumps(dict(notice.details)) if notice.details else None,
            )
        )
        session.commit()


def newest_stop(db: sessionmaker[Session], user: str, *, now: datetime) -> StopNotice | None:
    """The user's newest stop of the last :data:`NOTICE_DAYS` days, of any of their servers."""
    since = _naive(now) - timedelta(days=NOTICE_DAYS)
    query = (
        select(StopRecord)
        .where(StopRecord.user_name == user, StopRecord.stopped_at >= since)
        .order_by(StopRecord.stopped_at.desc(), StopRecord.id.desc())
        .limit(1)
    )
    with db() as session:
        found = session.scalars(query).first()
    if found is None:
        return None
    details = json.loads(found.details) if found.details else {}
    return StopNotice(found.user_name, found.server_name, found.stopped_at, found.reason, found.limit_seconds, details)


def purge_stops(db: sessionmaker[Session], *, now: datetime, keep_days: float) -> int:
    cutoff = _naive(now) - timedelta(days=keep_days)
    with db() as session:
        gone = session.execute(delete(StopRecord).where(StopRecord.stopped_at < cutoff)).rowcount or 0
        session.commit()
    return int(gone)


def _naive(moment: datetime) -> datetime:
    return moment.astimezone(timezone.utc).replace(tzinfo=None) if moment.tzinfo else moment
