"""Storing session reports in SQL: the same behaviour on SQLite and on a real PostgreSQL."""

from __future__ import annotations

from datetime import datetime

import pytest
from sqlalchemy import inspect, text

from fracnb_schemas import SESSION_REPORT, problems
from fracnb_spawner.history import db, store
from tests.history.records import GIB, gpu_unused, report


def test_migrations_build_the_schema_from_an_empty_database(db_url: str) -> None:
    engine = db.make_engine(db_url)
    assert inspect(engine).get_table_names() == []
    assert db.current_revision(engine) is None
    db.upgrade(engine)
    assert db.current_revision(engine) == db.head_revision() == "0003"
    assert {"fracnb_sessions", "fracnb_session_days", "fracnb_stops"} <= set(inspect(engine).get_table_names())
    columns = {column["name"] for column in inspect(engine).get_columns("fracnb_sessions")}
    assert {"user_name", "server_name", "profile", "choice", "fraction", "budget_bytes", "backend", "started_at",
            "ended_at", "peak_bytes", "seconds_above_80", "seconds_above_95", "oom_events", "busy_share"} <= columns  # fmt: skip
    db.upgrade(engine)  # a current database: nothing to do, nothing lost
    assert db.current_revision(engine) == "0003"
    engine.dispose()


def test_the_literal_reports_fit_the_schema() -> None:
    assert problems(SESSION_REPORT, report(ended="2026-11-01T12:00:00Z"), check_formats=True) == []
    for unused in (gpu_unused(), gpu_unused(None)):
        assert problems(SESSION_REPORT, report(gpu_unused=unused), check_formats=True) == []


def test_gpu_unused_time_is_taken_but_not_stored(history) -> None:
    """A live figure for culling, not a statistic of the session: the record keeps its columns only."""
    assert store.store_report(history, "ann", report(gpu_unused=gpu_unused())) is not None
    [record] = store.sessions_of(history, "ann")
    assert "gpu_unused" not in record
    assert record["peak_bytes"] == 6 * GIB


def test_a_report_is_stored_and_replaced_by_later_ones_of_its_session(history) -> None:
    first = store.store_report(history, "ann", report(peak_bytes=2 * GIB, observed_seconds=600.0))
    assert first is not None
    assert first.observed_added == 600.0
    later = report(peak_bytes=7 * GIB, observed_seconds=1800.0, reported="2026-11-01T11:30:00Z",
                   ended="2026-11-01T11:30:00Z")  # fmt: skip
    second = store.store_report(history, "ann", later)
    assert second is not None
    assert second.observed_added == 1200.0
    assert second.just_ended
    [record] = store.sessions_of(history, "ann")
    assert record["peak_bytes"] == 7 * GIB
    assert record["ended_at"] == datetime(2026, 11, 1, 11, 30)
    assert record["started_at"] == datetime(2026, 11, 1, 10, 0)
    # A post that arrives late (older than what is stored) changes nothing.
    assert store.store_report(history, "ann", report(peak_bytes=GIB, reported="2026-11-01T11:00:00Z")) is None
    assert store.sessions_of(history, "ann")[0]["peak_bytes"] == 7 * GIB


def test_a_session_id_cannot_move_to_another_server(history) -> None:
    store.store_report(history, "ann", report())
    with pytest.raises(store.ReportConflictError, match="another server"):
        store.store_report(history, "ann", report(server_name="other", reported="2026-11-01T12:00:00Z"))


def test_users_see_only_their_own_sessions_newest_first(history) -> None:
    store.store_report(history, "ann", report("1" * 32, started="2026-11-01T08:00:00Z"))
    store.store_report(history, "ann", report("2" * 32, started="2026-11-02T08:00:00Z"))
    store.store_report(history, "bob", report("1" * 32, started="2026-11-03T08:00:00Z"))  # same id, another user
    assert [r["session_id"] for r in store.sessions_of(history, "ann")] == ["2" * 32, "1" * 32]
    assert [r["user_name"] for r in store.sessions_of(history, "bob")] == ["bob"]
    assert store.sessions_of(history, "nobody") == []


def test_retention_deletes_only_records_older_than_the_limit(history) -> None:
    store.store_report(history, "ann", report("1" * 32, reported="2026-08-01T00:00:00Z"))
    store.store_report(history, "ann", report("2" * 32, reported="2026-10-01T00:00:00Z"))
    now = datetime(2026, 11, 1)
    assert store.purge(history, now=now, keep_days=90) == 1
    assert [r["session_id"] for r in store.sessions_of(history, "ann")] == ["2" * 32]
    assert store.purge(history, now=now, keep_days=90) == 0


def test_a_restart_loses_nothing_stored(db_url: str) -> None:
    history = db.open_database(db_url)
    store.store_report(history, "ann", report(peak_bytes=5 * GIB))
    db.close(history)
    reopened = db.open_database(db_url)  # the service starting again: migrations find nothing to do
    assert [r["peak_bytes"] for r in store.sessions_of(reopened, "ann")] == [5 * GIB]
    db.close(reopened)


def test_a_bad_url_is_refused_naming_it_without_the_password() -> None:
    with pytest.raises(db.HistoryDatabaseError, match=r"postgresql\+psycopg://fracnb:\*\*\*@127\.0\.0\.1:1/x"):
        db.open_database("postgresql+psycopg://fracnb:secret@127.0.0.1:1/x", connect_args={"connect_timeout": 2})


def test_a_database_migrated_by_a_newer_fracnb_is_refused_not_changed(db_url: str) -> None:
    """No automatic downgrade (docs/operations.md): an older service names the problem and stops."""
    history = db.open_database(db_url)
    store.store_report(history, "ann", report(peak_bytes=5 * GIB))
    engine = history.kw["bind"]
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = 'f00000000099'"))
    db.close(history)
    with pytest.raises(db.HistoryDatabaseError, match=r"cannot open the session history database .*f00000000099"):
        db.open_database(db_url)
    engine = db.make_engine(db_url)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM fracnb_sessions")).scalar() == 1
    engine.dispose()
