"""The per-day rollup: its arithmetic on literal records, then kept equal to the session table on SQLite and
PostgreSQL through reports, updates, purges and the migration's backfill."""

from __future__ import annotations

import math
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from datetime import date, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, inspect, select
from sqlalchemy.orm import Session, sessionmaker

from fracnb_spawner.history import db, rollup, store
from fracnb_spawner.history.models import SessionDay, SessionRecord, per_mille
from fracnb_spawner.history.report import (
    build_report,
    fold_groups,
    load_report,
    query_session_groups,
)
from tests.history.records import GIB, report, row

CHOICES = [("a100", "size=half", 0.5, 40 * GIB), ("a100", "size=eighth", 0.125, 10 * GIB),
           ("mig", "slice=1g.10gb", 1 / 7, 10 * GIB), (None, None, None, None)]  # fmt: skip


def seeded(seed: int) -> random.Random:
    return random.Random(seed)  # noqa: S311 (reproducible test data, not secrets)


def record(**figures: Any) -> dict[str, Any]:
    values = row("ann", 1, datetime(2026, 11, 1, 23, 30), **figures)
    return {**values, "peak_per_mille": per_mille(values["peak_bytes"], values["budget_bytes"])}


def test_a_session_counts_on_the_day_it_started_even_past_midnight() -> None:
    late = record(observed_seconds=7200.0, oom_events=2)  # 23:30 to 01:30
    assert rollup.key_of(late) == rollup.DayKey("a100", "size=half", 150, date(2026, 11, 1), 0.5, 40 * GIB)
    assert rollup.sums_of(late) == rollup.DaySums(1, 1.0, 0.25, 0, 1)  # reached its budget, no error
    assert rollup.sums_of(record(oom_events=1, oom_errors=1)) == rollup.DaySums(1, 0.5, 0.125, 1, 1)
    assert rollup.sums_of(record(seconds_above_95=3.0)) == rollup.DaySums(1, 0.5, 0.125, 0, 1)


def test_unknown_values_become_the_tables_sentinels() -> None:
    bare = record(profile=None, choice=None, fraction=None, budget_bytes=None, peak_bytes=None, busy_share=None)
    assert rollup.key_of(bare) == rollup.DayKey("", "", -1, date(2026, 11, 1), 0.0, 0)
    assert rollup.sums_of(bare) == rollup.DaySums(1, 0.0, 0.0, 0, 0)


def test_an_update_replaces_the_old_contribution() -> None:
    first, later = record(peak_bytes=2 * GIB), record(peak_bytes=2 * GIB, observed_seconds=7200.0)
    assert rollup.deltas([first], [later]) == {rollup.key_of(first): rollup.DaySums(0, 0.5, 0.125, 0, 0)}
    moved = record(peak_bytes=8 * GIB)  # the peak moved to another bucket: one row loses it, one gains it
    assert rollup.deltas([first], [moved]) == {
        rollup.key_of(first): rollup.DaySums(-1, -0.5, -0.125, 0, 0),
        rollup.key_of(moved): rollup.DaySums(1, 0.5, 0.125, 0, 0),
    }


# ---- on the databases -----------------------------------------------------------------------------


def rollup_rows(history: sessionmaker[Session]) -> dict[rollup.DayKey, rollup.DaySums]:
    with history() as session:
        days = session.scalars(select(SessionDay)).all()
    return {rollup.DayKey(*(getattr(d, k) for k in rollup.KEY_COLUMNS)):
            rollup.DaySums(*(getattr(d, k) for k in rollup.SUM_COLUMNS)) for d in days}  # fmt: skip


def recomputed(history: sessionmaker[Session]) -> dict[rollup.DayKey, rollup.DaySums]:
    """The rollup as it should be: every stored record summed afresh."""
    with history() as session:
        records = [store.as_dict(r) for r in session.scalars(select(SessionRecord))]
    return rollup.deltas([], records)


def assert_same_rollup(
    actual: dict[rollup.DayKey, rollup.DaySums], wanted: dict[rollup.DayKey, rollup.DaySums]
) -> None:
    assert actual.keys() == wanted.keys()
    for key, sums in wanted.items():
        assert actual[key] == pytest.approx(sums, abs=1e-9), key


def random_reports(chance: random.Random, sessions: int) -> list[tuple[str, dict[str, Any]]]:
    """Each session reported 1 to 4 times (periodic, then final), in a shuffled order, some sessions
    changing choice or crossing midnight."""
    posts = []
    for number in range(sessions):
        profile, choice, fraction, budget = chance.choice(CHOICES)
        began = datetime(2026, 11, 1) + timedelta(minutes=chance.randrange(5 * 24 * 60))
        peak = 0
        for update in range(chance.randint(1, 4)):
            if chance.random() < 0.1:
                profile, choice, fraction, budget = chance.choice(CHOICES)
            observed = 600.0 * (update + 1) * chance.uniform(1, 8)
            limit = budget or 40 * GIB
            peak = min(limit, max(peak, int(limit * chance.betavariate(2, 5))))
            at = began + timedelta(seconds=observed)
            posts.append((f"user{number % 7}", report(
                f"{number:032x}", started=began.isoformat() + "Z", reported=at.isoformat() + "Z",
                ended=at.isoformat() + "Z" if update == 3 else None, profile=profile, choice=choice,
                fraction=fraction, budget_bytes=budget, peak_bytes=peak if chance.random() > 0.05 else None,
                observed_seconds=observed, oom_events=int(peak >= 0.98 * limit),
                busy_share=chance.choice([None, chance.random()]),
            )))  # fmt: skip
    chance.shuffle(posts)
    return posts


def exact_percentile(ratios: list[float], share: float) -> float:
    return sorted(ratios)[math.ceil(share * len(ratios)) - 1]


def test_reports_updates_and_purges_keep_the_rollup_equal_to_the_sessions(history, monkeypatch) -> None:
    chance = seeded(5)
    for user, post in random_reports(chance, 120):
        store.store_report(history, user, post)
    assert_same_rollup(rollup_rows(history), recomputed(history))
    monkeypatch.setattr(store, "PURGE_BATCH", 7)  # several batches
    stored = store.count(history)
    purged = store.purge(history, now=datetime(2026, 11, 3) + timedelta(days=90), keep_days=90)
    assert 7 < purged < stored
    assert store.count(history) == stored - purged
    assert_same_rollup(rollup_rows(history), recomputed(history))
    assert all(sums.sessions > 0 for sums in rollup_rows(history).values())  # emptied rows are gone


def test_the_rollup_report_equals_the_one_from_every_session(history) -> None:
    for user, post in random_reports(seeded(8), 150):
        store.store_report(history, user, post)
    with history() as session:
        everything = query_session_groups(session, datetime(2000, 1, 1), datetime(2100, 1, 1))
        records = [store.as_dict(r) for r in session.scalars(select(SessionRecord))]
    from_rows = build_report(*fold_groups(everything))
    from_rollup = load_report(history)
    assert [r.label for r in from_rollup.rows] == [r.label for r in from_rows.rows]
    for mine, theirs in zip(from_rollup.rows, from_rows.rows, strict=True):
        assert asdict(mine) == pytest.approx(asdict(theirs))
    assert from_rollup.advice == from_rows.advice
    # Against the exact percentiles: the rollup's answer is the upper edge of the 0.1 % bin holding them.
    for choice_row in from_rollup.rows:
        ratios = [r["peak_bytes"] / r["budget_bytes"] for r in records
                  if (r["profile"] or "", r["choice"] or "") == (choice_row.profile, choice_row.choice)
                  and r["peak_bytes"] is not None and r["budget_bytes"]]  # fmt: skip
        if not ratios:
            assert choice_row.peak_p50_of_budget is None
            continue
        for share, answer in ((0.5, choice_row.peak_p50_of_budget), (0.95, choice_row.peak_p95_of_budget)):
            exact = exact_percentile(ratios, share)
            assert answer is not None
            assert exact < answer <= exact + 0.001 + 1e-12


def test_a_window_starting_mid_day_reads_that_day_from_the_sessions(history) -> None:
    start = datetime(2026, 11, 1)
    rows = [row("ann", n, start + timedelta(hours=5 * n), peak_bytes=(n % 9 + 1) * GIB) for n in range(30)]
    store.insert_many(history, rows)
    since = datetime(2026, 11, 2, 7, 30)
    report_rows = load_report(history, since=since).rows
    wanted = [r for r in rows if r["started_at"] >= since]
    assert [r.sessions for r in report_rows] == [len(wanted)]
    assert report_rows[0].gpu_hours_allocated == pytest.approx(0.5 * len(wanted))
    assert load_report(history, since=datetime(2026, 11, 3)).rows[0].sessions == sum(
        r["started_at"] >= datetime(2026, 11, 3) for r in rows
    )


# ---- the migration ------------------------------------------------------------------------------


def test_the_migration_backfills_the_rollup_from_stored_sessions(db_url: str) -> None:
    engine = db.make_engine(db_url)
    db.upgrade(engine, "0001")
    chance = seeded(3)
    rows = [row(f"user{n % 5}", n, datetime(2026, 11, 1) + timedelta(minutes=chance.randrange(4 * 1440)),
                peak_bytes=chance.choice([None, chance.randrange(40 * GIB)]), oom_events=chance.randrange(2),
                busy_share=chance.choice([None, 0.5])) for n in range(400)]  # fmt: skip
    prepared = [{**r, "peak_per_mille": per_mille(r["peak_bytes"], r["budget_bytes"])} for r in rows]
    with engine.begin() as connection:
        connection.execute(SessionRecord.__table__.insert(), prepared)
    db.upgrade(engine)
    assert db.current_revision(engine) == db.head_revision()
    assert session_indexes(engine) == {"ix_fracnb_sessions_user_started", "ix_fracnb_sessions_reported",
                                       "ix_fracnb_sessions_started"}  # fmt: skip
    history = db.open_database(db_url)
    assert_same_rollup(rollup_rows(history), rollup.deltas([], prepared))
    assert sum(r.sessions for r in load_report(history).rows) == 400
    db.downgrade(engine, "0001")  # back: the rollup goes, the old report index returns
    assert "fracnb_session_days" not in inspect(engine).get_table_names()
    assert "ix_fracnb_sessions_report" in session_indexes(engine)
    db.upgrade(engine)
    assert_same_rollup(rollup_rows(history), rollup.deltas([], prepared))
    db.close(history)
    engine.dispose()


def session_indexes(engine: Engine) -> set[str]:
    """The named indexes (PostgreSQL also lists the unique constraint's index, SQLite does not)."""
    return {
        index["name"] for index in inspect(engine).get_indexes("fracnb_sessions") if index["name"].startswith("ix_")
    }


def test_reports_of_one_session_at_once_count_it_once(history) -> None:
    # Periodic and final posts can overlap: each must subtract what the other stored, not what both read.
    began = datetime(2026, 11, 1, 10)
    posts = [report("c" * 32, started=began.isoformat() + "Z", observed_seconds=60.0 * n, peak_bytes=n * GIB // 4,
                    reported=(began + timedelta(minutes=n)).isoformat() + "Z") for n in range(1, 121)]  # fmt: skip
    seeded(1).shuffle(posts)
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda post: store.store_report(history, "ann", post), posts))
    assert_same_rollup(rollup_rows(history), recomputed(history))
    assert sum(sums.sessions for sums in rollup_rows(history).values()) == 1
