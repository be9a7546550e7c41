"""The session table.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# The report index's columns as of this revision (models.REPORT_INDEX_COLUMNS may change later).
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

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fracnb_sessions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(32), nullable=False),
        sa.Column("user_name", sa.String(255), nullable=False),
        sa.Column("server_name", sa.String(255), nullable=False),
        sa.Column("profile", sa.String(255), nullable=True),
        sa.Column("choice", sa.String(255), nullable=True),
        sa.Column("fraction", sa.Float(), nullable=True),
        sa.Column("budget_bytes", sa.BigInteger(), nullable=True),
        sa.Column("backend", sa.String(255), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.Column("reported_at", sa.DateTime(), nullable=False),
        sa.Column("peak_bytes", sa.BigInteger(), nullable=True),
        sa.Column("peak_per_mille", sa.Integer(), nullable=True),
        sa.Column("observed_seconds", sa.Float(), nullable=False),
        sa.Column("seconds_above_80", sa.Float(), nullable=False),
        sa.Column("seconds_above_95", sa.Float(), nullable=False),
        sa.Column("oom_events", sa.Integer(), nullable=False),
        sa.Column("busy_share", sa.Float(), nullable=True),
        sa.UniqueConstraint("user_name", "session_id", name="uq_fracnb_sessions_user_session"),
    )
    op.create_index("ix_fracnb_sessions_user_started", "fracnb_sessions", ["user_name", "started_at"])
    op.create_index("ix_fracnb_sessions_reported", "fracnb_sessions", ["reported_at"])
    op.create_index("ix_fracnb_sessions_report", "fracnb_sessions", list(REPORT_COLUMNS))


def downgrade() -> None:
    op.drop_table("fracnb_sessions")
