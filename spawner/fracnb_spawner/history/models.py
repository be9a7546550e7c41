"""The session table and its per-day rollup. Their shape changes only through a new migration in
``migrations/versions``."""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import BigInteger, Date, DateTime, Float, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def per_mille(peak_bytes: int | None, budget_bytes: int | None) -> int | None:
    """The peak in thousandths of the budget, rounded down; None when either is unknown."""
    if peak_bytes is None or not budget_bytes:
        return None
    return peak_bytes * 1000 // budget_bytes


class Base(DeclarativeBase):
    pass


class SessionRecord(Base):
    """One server session of one user: what it ran on and what its GPU memory did. Times are naive UTC."""

    __tablename__ = "fracnb_sessions"
    __table_args__ = (
        UniqueConstraint("user_name", "session_id", name="uq_fracnb_sessions_user_session"),
        Index("ix_fracnb_sessions_user_started", "user_name", "started_at"),
        Index("ix_fracnb_sessions_reported", "reported_at"),
        # The report reads the first day of a --since-days window here (later days from the rollup).
        Index("ix_fracnb_sessions_started", "started_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(String(32))
    user_name: Mapped[str] = mapped_column(String(255))
    server_name: Mapped[str] = mapped_column(String(255))
    profile: Mapped[str | None] = mapped_column(String(255))
    choice: Mapped[str | None] = mapped_column(String(255))
    fraction: Mapped[float | None] = mapped_column(Float)
    budget_bytes: Mapped[int | None] = mapped_column(BigInteger)
    backend: Mapped[str | None] = mapped_column(String(255))
    started_at: Mapped[datetime] = mapped_column(DateTime)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime)
    reported_at: Mapped[datetime] = mapped_column(DateTime)
    peak_bytes: Mapped[int | None] = mapped_column(BigInteger)
    peak_per_mille: Mapped[int | None] = mapped_column(Integer)  # per_mille(peak_bytes, budget_bytes)
    observed_seconds: Mapped[float] = mapped_column(Float)
    seconds_above_80: Mapped[float] = mapped_column(Float)
    seconds_above_95: Mapped[float] = mapped_column(Float)
    oom_events: Mapped[int] = mapped_column(Integer)
    busy_share: Mapped[float | None] = mapped_column(Float)
    oom_errors: Mapped[int | None] = mapped_column(Integer)  # None: the meter did not say (before 0003)


class SessionDay(Base):
    """The sums of the sessions that started on one UTC day with one choice, budget and peak: what the admins'
    report reads instead of every session (rollup.py keeps it equal to the session table).

    A session counts on the day it started, even when it runs past midnight. Unknown values are stored as
    sentinels (every key column is in the primary key, so none can be NULL): profile and choice ``""``,
    fraction ``0.0``, budget ``0`` and peak ``-1``.
    """

    __tablename__ = "fracnb_session_days"
    __table_args__ = {"sqlite_with_rowid": False}  # noqa: RUF012 (SQLAlchemy's declarative attribute)

    # Key order: the report groups by (profile, choice, peak); SQLite walks the primary key in that order.
    profile: Mapped[str] = mapped_column(String(255), primary_key=True)
    choice: Mapped[str] = mapped_column(String(255), primary_key=True)
    peak_per_mille: Mapped[int] = mapped_column(Integer, primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    fraction: Mapped[float] = mapped_column(Float, primary_key=True)
    budget_bytes: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    sessions: Mapped[int] = mapped_column(Integer)
    gpu_hours_allocated: Mapped[float] = mapped_column(Float)  # fraction x observed hours
    gpu_hours_busy: Mapped[float] = mapped_column(Float)  # x busy share
    oom_sessions: Mapped[int] = mapped_column(Integer)  # sessions with an out-of-memory error (0003; before: events)
    reached_sessions: Mapped[int] = mapped_column(Integer)  # sessions that reached their budget (advice.hit_budget)


class StopRecord(Base):
    """A server the fracnb service stopped, and why: what the hub and the service page tell its user
    afterwards (:mod:`fracnb_spawner.history.stopnotices`). Times are naive UTC."""

    __tablename__ = "fracnb_stops"
    __table_args__ = (Index("ix_fracnb_stops_user_stopped", "user_name", "stopped_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_name: Mapped[str] = mapped_column(String(255))
    server_name: Mapped[str] = mapped_column(String(255))
    stopped_at: Mapped[datetime] = mapped_column(DateTime)
    reason: Mapped[str] = mapped_column(String(32))  # culling.Reason: idle, demand, max-age
    limit_seconds: Mapped[float | None] = mapped_column(Float)  # the idle timeout or maximum age that applied
    details: Mapped[str | None] = mapped_column(Text)  # JSON: more for the notice (what was saved, ...)
