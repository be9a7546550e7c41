"""The per-day rollup the admins' report reads, filled from the sessions already stored.

The report no longer scans the session table, so its covering index goes; an index on the start
time serves the first, partial day of a ``--since-days`` window.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fracnb_spawner.history import rollup

# The report index of revision 0001, restored by the downgrade.
REPORT_COLUMNS = (
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
BATCH = 10_000

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TYPES = {"started_at": sa.DateTime()}  # SQLite hands back an untyped time as text
# The session columns and the sums of this revision (later revisions add to both: see 0003).
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
)
SESSIONS = sa.table("fracnb_sessions", *(sa.column(name, TYPES.get(name)) for name in SOURCE_COLUMNS))


def upgrade() -> None:
    days = op.create_table(
        "fracnb_session_days",
        sa.Column("profile", sa.String(255), primary_key=True),
        sa.Column("choice", sa.String(255), primary_key=True),
        sa.Column("peak_per_mille", sa.Integer(), primary_key=True),
        sa.Column("day", sa.Date(), primary_key=True),
        sa.Column("fraction", sa.Float(), primary_key=True),
        sa.Column("budget_bytes", sa.BigInteger(), primary_key=True),
        sa.Column("sessions", sa.Integer(), nullable=False),
        sa.Column("gpu_hours_allocated", sa.Float(), nullable=False),
        sa.Column("gpu_hours_busy", sa.Float(), nullable=False),
        sa.Column("oom_sessions", sa.Integer(), nullable=False),
        sqlite_with_rowid=False,  # rows stored in key order: the report's GROUP BY is one ordered scan
    )
    op.create_index("ix_fracnb_sessions_started", "fracnb_sessions", ["started_at"])
    op.drop_index("ix_fracnb_sessions_report", table_name="fracnb_sessions")
    backfill(op.get_bind(), days)


def backfill(connection: sa.Connection, days: sa.Table) -> None:
    """Sum every stored session into the rollup with this revision's arithmetic."""
    streamed = {"stream_results": True, "yield_per": BATCH}  # for this query only, not the migration's connection
    records = connection.execute(sa.select(SESSIONS), execution_options=streamed)
    sums: dict[rollup.DayKey, list[float]] = {}
    for row in records:
        record = row._mapping
        allocated = (record["fraction"] or 0.0) * record["observed_seconds"] / 3600.0
        total = sums.setdefault(rollup.key_of(record), [0, 0.0, 0.0, 0])
        total[0] += 1
        total[1] += allocated
        total[2] += allocated * (record["busy_share"] or 0.0)
        total[3] += int(record["oom_events"] > 0)
    names = ("sessions", "gpu_hours_allocated", "gpu_hours_busy", "oom_sessions")
    rows = [{**key._asdict(), **dict(zip(names, total, strict=True))} for key, total in sums.items()]
    for start in range(0, len(rows), BATCH):
        connection.execute(days.insert(), rows[start : start + BATCH])


def downgrade() -> None:
    op.create_index("ix_fracnb_sessions_report", "fracnb_sessions", list(REPORT_COLUMNS))
    op.drop_index("ix_fracnb_sessions_started", table_name="fracnb_sessions")
    op.drop_table("fracnb_session_days")
