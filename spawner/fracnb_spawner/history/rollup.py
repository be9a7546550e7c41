"""The per-day rollup (table ``fracnb_session_days``) kept equal to the session table.

Every write of session records goes through here in the same transaction: a session's first
report adds its contribution, each later report subtracts the contribution stored before and
adds the new one (so reporting a session many times counts it once), and the retention purge
subtracts what it deletes. The arithmetic is pure (:func:`key_of`, :func:`sums_of`,
:func:`deltas`); :func:`apply` writes deltas as one upsert per key (SQLite and PostgreSQL's
``INSERT ... ON CONFLICT DO UPDATE``), then deletes the keys left without sessions.

A session is counted on the UTC day it started, also when it runs past midnight: a session's
figures are totals over the whole session, so they cannot be split by day honestly. Peaks are kept
in thousandths of the budget (``peak_per_mille``, rounded down), so the report's percentiles are
exact to 0.1 % of the budget: the same resolution as reading every session.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import date
from typing import Any, NamedTuple

from sqlalchemy import and_, delete, or_
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from fracnb_spawner.history.models import SessionDay

UNKNOWN_PEAK = -1
# The session columns a contribution depends on (what the backfill and the purge read).
SOURCE_COLUMNS = (
    "started_at",
    "profile",
    "choice",
    "fraction",
    "budget_bytes",
    "peak_per_mille",
    "observed_seconds",
    "busy_share",
    "oom_events",
    "oom_errors",
    "seconds_above_95",
)


class DayKey(NamedTuple):
    profile: str
    choice: str
    peak_per_mille: int
    day: date
    fraction: float
    budget_bytes: int


class DaySums(NamedTuple):
    sessions: int
    gpu_hours_allocated: float
    gpu_hours_busy: float
    oom_sessions: int  # with an out-of-memory error
    reached_sessions: int  # that reached their budget

    def plus(self, other: DaySums, sign: int = 1) -> DaySums:
        return DaySums(*(mine + sign * theirs for mine, theirs in zip(self, other, strict=True)))


NO_SUMS = DaySums(0, 0.0, 0.0, 0, 0)
KEY_COLUMNS = DayKey._fields
SUM_COLUMNS = DaySums._fields


def key_of(record: Mapping[str, Any]) -> DayKey:
    """The rollup row a session record counts in (unknown values as the table's sentinels)."""
    peak = record["peak_per_mille"]
    return DayKey(
        profile=record["profile"] or "",
        choice=record["choice"] or "",
        peak_per_mille=UNKNOWN_PEAK if peak is None else int(peak),
        day=record["started_at"].date(),
        fraction=float(record["fraction"] or 0.0),
        budget_bytes=int(record["budget_bytes"] or 0),
    )


def sums_of(record: Mapping[str, Any]) -> DaySums:
    """One session's contribution: itself, its GPU-hours allocated and busy, whether it had an out-of-memory
    error, whether it reached its budget (the advice's rule: :attr:`.advice.PastSession.hit_budget`)."""
    allocated = (record["fraction"] or 0.0) * record["observed_seconds"] / 3600.0
    reached = record["oom_events"] > 0 or (record["seconds_above_95"] or 0) > 0
    oom = (record.get("oom_errors") or 0) > 0
    return DaySums(1, allocated, allocated * (record["busy_share"] or 0.0), int(oom), int(reached))


def deltas(removed: Iterable[Mapping[str, Any]], added: Iterable[Mapping[str, Any]]) -> dict[DayKey, DaySums]:
    """Net change per rollup row of removing ``removed`` records and adding ``added`` ones; a record
    replaced by its own update under the same key nets to zero sessions."""
    changes: dict[DayKey, DaySums] = {}
    for sign, records in ((-1, removed), (1, added)):
        for record in records:
            key = key_of(record)
            changes[key] = changes.get(key, NO_SUMS).plus(sums_of(record), sign)
    return changes


def _insert(session: Session) -> Any:
    dialect = session.get_bind().dialect.name
    module = {"sqlite": sqlite, "postgresql": postgresql}.get(dialect)
    if module is None:
        raise NotImplementedError(f"the session history supports SQLite and PostgreSQL, not {dialect}")
    return module.insert(SessionDay)


def apply(session: Session, changes: Mapping[DayKey, DaySums]) -> None:
    """Add ``changes`` to the rollup in ``session``'s transaction (the caller commits)."""
    rows = [{**key._asdict(), **sums._asdict()} for key, sums in changes.items() if sums != NO_SUMS]
    if not rows:
        return
    insert = _insert(session)
    upsert = insert.on_conflict_do_update(
        index_elements=list(KEY_COLUMNS),
        set_={name: getattr(SessionDay, name) + insert.excluded[name] for name in SUM_COLUMNS},
    )
    session.execute(upsert, rows)
    shrunk = [key for key, sums in changes.items() if sums.sessions < 0]
    for start in range(0, len(shrunk), 100):
        matches = [and_(*(getattr(SessionDay, name) == value for name, value in key._asdict().items()))
                   for key in shrunk[start : start + 100]]  # fmt: skip
        session.execute(delete(SessionDay).where(SessionDay.sessions <= 0, or_(*matches)))
