"""Out-of-memory errors apart from reaching the budget, and the servers the service stopped.

- ``fracnb_sessions.oom_errors``: the errors a meter counted (NULL for reports of older meters).
- ``fracnb_session_days``: ``oom_sessions`` now counts sessions with an error, and
  ``reached_sessions`` those that reached their budget (time at 95 % of it, or at the budget); the
  rollup is summed again from the stored sessions with that arithmetic.
- ``fracnb_stops``: a row per server the service stopped, and why (history/stopnotices.py).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fracnb_spawner.history import rollup

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

BATCH = 10_000
TYPES = {"started_at": sa.DateTime()}  # SQLite hands back an untyped time as text
SESSIONS = sa.table("fracnb_sessions", *(sa.column(name, TYPES.get(name)) for name in rollup.SOURCE_COLUMNS))
DAYS = sa.table("fracnb_session_days", *(sa.column(name) for name in (*rollup.KEY_COLUMNS, *rollup.SUM_COLUMNS)))


def upgrade() -> None:
    op.add_column("fracnb_sessions", sa.Column("oom_errors", sa.Integer(), nullable=True))
    op.add_column(
        "fracnb_session_days", sa.Column("reached_sessions", sa.Integer(), nullable=False, server_default="0")
    )
    connection = op.get_bind()
    connection.execute(sa.delete(DAYS))
    streamed = {"stream_results": True, "yield_per": BATCH}
    records = connection.execute(sa.select(SESSIONS), execution_options=streamed)
    changes = rollup.deltas([], (row._mapping for row in records))
    rows = [{**key._asdict(), **sums._asdict()} for key, sums in changes.items()]
    for start in range(0, len(rows), BATCH):
        connection.execute(DAYS.insert(), rows[start : start + BATCH])
    op.create_table(
        "fracnb_stops",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("user_name", sa.String(255), nullable=False),
        sa.Column("server_name", sa.String(255), nullable=False),
        sa.Column("stopped_at", sa.DateTime(), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("limit_seconds", sa.Float(), nullable=True),
        sa.Column("details", sa.Text(), nullable=True),
    )
    op.create_index("ix_fracnb_stops_user_stopped", "fracnb_stops", ["user_name", "stopped_at"])


def downgrade() -> None:
    op.drop_index("ix_fracnb_stops_user_stopped", table_name="fracnb_stops")
    op.drop_table("fracnb_stops")
    with op.batch_alter_table("fracnb_session_days") as table:
        table.drop_column("reached_sessions")
    with op.batch_alter_table("fracnb_sessions") as table:
        table.drop_column("oom_errors")
