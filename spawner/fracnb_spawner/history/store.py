"""Storing session reports and reading them back; every function takes a session factory (db.open_database).

A report is stored under the user and server the caller's token belongs to (the handler checks
that); its ``session_id`` names the record. Later reports of the same session replace its figures,
except that a report older than the stored one changes nothing (posts can arrive out of order).
Times are stored as naive UTC, as JupyterHub stores them. Every write also updates the per-day
rollup the admins' report reads (rollup.py), in the same transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import delete, func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from fracnb_spawner.history import rollup
from fracnb_spawner.history.models import SessionRecord, per_mille

FIGURES = (
    "profile",
    "choice",
    "fraction",
    "budget_bytes",
    "backend",
    "peak_bytes",
    "observed_seconds",
    "seconds_above_80",
    "seconds_above_95",
    "oom_events",
    "busy_share",
)


class ReportConflictError(ValueError):
    """A report whose session id is already stored for another server of the user."""


def naive_utc(text: str) -> datetime:
    """An ISO 8601 time (with ``Z`` or an offset) as naive UTC."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return moment


@dataclass(frozen=True)
class Stored:
    """What storing a report changed: the seconds observed and busy before and after (for metrics)."""

    record: dict[str, Any]
    observed_before: float
    busy_before: float
    ended_before: bool = False

    @property
    def just_ended(self) -> bool:
        return self.record["ended_at"] is not None and not self.ended_before

    @property
    def observed_added(self) -> float:
        return max(self.record["observed_seconds"] - self.observed_before, 0.0)

    @property
    def busy_added(self) -> float:
        return max(busy_seconds(self.record) - self.busy_before, 0.0)


def busy_seconds(record: Mapping[str, Any]) -> float:
    return (record["busy_share"] or 0.0) * record["observed_seconds"]


def as_dict(record: SessionRecord) -> dict[str, Any]:
    return {column.name: getattr(record, column.name) for column in SessionRecord.__table__.columns}


def _values(user: str, report: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "session_id": report["session_id"],
        "user_name": user,
        "server_name": report["server_name"],
        "started_at": naive_utc(report["started_at"]),
        "ended_at": naive_utc(report["ended_at"]) if report["ended_at"] else None,
        "reported_at": naive_utc(report["reported_at"]),
        **{name: report[name] for name in FIGURES},
        "oom_errors": report.get("oom_errors"),  # meters before it send none
        "peak_per_mille": per_mille(report["peak_bytes"], report["budget_bytes"]),
    }


def _begin_writing(session: Session) -> None:
    """Take SQLite's write lock before reading what will be rewritten: its Python driver begins a
    transaction only at the first write, so two reports of one session read at once would both
    subtract the same old figures from the rollup (PostgreSQL: :func:`_find` locks the row)."""
    if session.get_bind().dialect.name == "sqlite":
        session.execute(text("BEGIN IMMEDIATE"))


def _find(session: Session, user: str, session_id: str) -> SessionRecord | None:
    """The stored record, locked until commit on PostgreSQL: two reports of one session at once must not
    both subtract the same old figures from the rollup."""
    query = select(SessionRecord).where(SessionRecord.user_name == user, SessionRecord.session_id == session_id)
    return session.scalars(query.with_for_update()).one_or_none()


def store_report(db: sessionmaker[Session], user: str, report: Mapping[str, Any]) -> Stored | None:
    """Store a (schema-checked) report for ``user``; None when a newer report of the session is stored."""
    values = _values(user, report)
    for _attempt in range(2):  # a concurrent first insert of the same session loses once, then updates
        with db() as session:
            _begin_writing(session)
            record = _find(session, user, values["session_id"])
            if record is None:
                session.add(SessionRecord(**values))
                try:
                    session.flush()
                    rollup.apply(session, rollup.deltas([], [values]))
                    session.commit()
                except IntegrityError:
                    session.rollback()
                    continue
                return Stored(values, 0.0, 0.0)
            if record.server_name != values["server_name"]:
                raise ReportConflictError(f"session {values['session_id']} belongs to another server")
            if record.reported_at > values["reported_at"]:
                return None
            before = as_dict(record)
            for name, value in values.items():
                setattr(record, name, value)
            rollup.apply(session, rollup.deltas([before], [values]))
            session.commit()
            ended_before = before["ended_at"] is not None
            return Stored(as_dict(record), before["observed_seconds"], busy_seconds(before), ended_before)
    raise ReportConflictError(f"session {values['session_id']} could not be stored")


def sessions_of(db: sessionmaker[Session], user: str, *, limit: int = 100) -> list[dict[str, Any]]:
    """The user's newest sessions first."""
    query = (
        select(SessionRecord)
        .where(SessionRecord.user_name == user)
        .order_by(SessionRecord.started_at.desc(), SessionRecord.id.desc())
        .limit(limit)
    )
    with db() as session:
        return [as_dict(record) for record in session.scalars(query)]


def busy_shares(
    db: sessionmaker[Session], users: Sequence[str], *, since: datetime
) -> tuple[dict[str, float], float | None]:
    """Each of ``users``' share of observed time busy, over sessions started since ``since`` (naive UTC), and
    every user's together (None without any): what placement expects of a card's holders."""
    observed = func.sum(SessionRecord.observed_seconds)
    busy = func.sum(SessionRecord.busy_share * SessionRecord.observed_seconds)
    measured = (
        SessionRecord.busy_share.is_not(None), SessionRecord.started_at >= since, SessionRecord.observed_seconds > 0
    )  # fmt: skip
    per_user = select(SessionRecord.user_name, busy, observed).where(*measured).group_by(SessionRecord.user_name)
    with db() as session:
        rows = session.execute(per_user.where(SessionRecord.user_name.in_(list(users)))).all() if users else []
        total_busy, total_observed = session.execute(select(busy, observed).where(*measured)).one()
    shares = {user: min(max(b / seen, 0.0), 1.0) for user, b, seen in rows if seen}
    return shares, (min(max(total_busy / total_observed, 0.0), 1.0) if total_observed else None)


PURGE_BATCH = 5_000


def purge(db: sessionmaker[Session], *, now: datetime, keep_days: float) -> int:
    """Delete sessions last reported more than ``keep_days`` before ``now`` (naive UTC), and their part of the
    rollup; how many went. Works in batches (one transaction each), so a long backlog needs little memory."""
    cutoff = now - timedelta(days=keep_days)
    columns = [SessionRecord.id, *(getattr(SessionRecord, name) for name in rollup.SOURCE_COLUMNS)]
    query = select(*columns).where(SessionRecord.reported_at < cutoff).limit(PURGE_BATCH).with_for_update()
    deleted = 0
    while True:
        with db() as session:
            _begin_writing(session)
            doomed = [row._mapping for row in session.execute(query)]
            if not doomed:
                return deleted
            rollup.apply(session, rollup.deltas(doomed, []))
            ids = [row["id"] for row in doomed]
            for start in range(0, len(ids), 500):
                session.execute(delete(SessionRecord).where(SessionRecord.id.in_(ids[start : start + 500])))
            session.commit()
            deleted += len(ids)


def count(db: sessionmaker[Session]) -> int:
    with db() as session:
        return int(session.scalar(select(func.count()).select_from(SessionRecord)) or 0)


def insert_many(db: sessionmaker[Session], rows: Sequence[Mapping[str, Any]]) -> None:
    """Bulk insert of prepared rows of new sessions (benchmarks and tests), with their rollup;
    ``peak_per_mille`` is filled in."""
    prepared = [
        {"oom_errors": None, **row, "peak_per_mille": per_mille(row["peak_bytes"], row["budget_bytes"])} for row in rows
    ]
    with db() as session:
        session.execute(SessionRecord.__table__.insert(), prepared)
        rollup.apply(session, rollup.deltas([], prepared))
        session.commit()
