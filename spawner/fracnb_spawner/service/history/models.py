"""The session table. Its shape changes only through a new migration in ``migrations/versions``."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Float, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

REPORT_INDEX_COLUMNS = (
    "profile",
    "choice",
    "peak_per_mille",
    "fraction",
    "observed_seconds",
    "busy_share",
    "oom_events",
    "budget_bytes",
    "started_at",
)


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
        # Covers the admins' report: one ordered scan of this index groups by choice and peak, no sort.
        Index("ix_fracnb_sessions_report", *REPORT_INDEX_COLUMNS),
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
