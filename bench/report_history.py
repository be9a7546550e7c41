"""``fracnb-report`` over a million session records, on SQLite and on PostgreSQL.

Each database is created empty and migrated as the service does, then filled with
``--records`` sessions (default 1,000,000) spread over 2,000 users and the choices of two
profiles over 90 days, with peaks drawn around a typical share of each budget. The rows go in
through ``store.insert_many``, which keeps the per-day rollup as the service's writes do (each
batch's contributions added in its transaction). Timed, ``--runs`` times each:

- the report as ``fracnb-report`` builds it (the rollup query and the text output), over all
  sessions and over a 30-day window starting mid-day (that day read from the session table);
- one user's newest sessions, as the spawn form's advice reads them.

Then, once: the migration's backfill, by going back to revision 0001 and timing the upgrade to
0002 over the million stored sessions; the rebuilt rollup must equal the incrementally kept one.

The PostgreSQL server is a throw-away one (fracnb_testbed.postgres: Debian's binaries, a
temporary directory, a free port). The report gives medians; the target is under 2 s.

    python -m bench.report_history [--records 1000000] [--runs 5] [--databases sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import func, select

from fracnb_spawner.history import db, store
from fracnb_spawner.history.models import SessionDay
from fracnb_spawner.history.report import as_text, load_report
from fracnb_testbed.postgres import running_postgres

GIB = 1 << 30
BATCH = 20_000
# (profile, choice, fraction, budget in GiB, typical peak as a share of the budget)
CHOICES = [
    ("a100", "size=half", 0.5, 40, 0.2),
    ("a100", "size=quarter", 0.25, 20, 0.4),
    ("a100", "size=eighth", 0.125, 10, 0.7),
    ("mig", "slice=1g.10gb", 1 / 7, 10, 0.6),
    ("mig", "slice=3g.40gb", 3 / 7, 40, 0.3),
]


def rows(count: int, seed: int = 12) -> Iterator[list[dict[str, object]]]:
    """Batches of prepared session rows."""
    chance = random.Random(seed)
    start = datetime(2026, 8, 1)
    batch: list[dict[str, object]] = []
    for number in range(count):
        profile, choice, fraction, budget_gib, typical = chance.choice(CHOICES)
        budget = budget_gib * GIB
        peak = min(budget, int(budget * min(1.0, chance.lognormvariate(0, 0.5) * typical)))
        began = start + timedelta(seconds=chance.randrange(90 * 86400))
        observed = chance.uniform(600, 8 * 3600)
        pinned = peak >= 0.99 * budget
        batch.append({
            "session_id": f"{number:032x}", "user_name": f"user{chance.randrange(2000)}", "server_name": "",
            "profile": profile, "choice": choice, "fraction": fraction, "budget_bytes": budget,
            "backend": "mig" if profile == "mig" else "time-slicing", "started_at": began,
            "ended_at": began + timedelta(seconds=observed), "reported_at": began + timedelta(seconds=observed),
            "peak_bytes": peak, "observed_seconds": observed, "seconds_above_80": observed * 0.1 if pinned else 0.0,
            "seconds_above_95": observed * 0.05 if pinned else 0.0, "oom_events": int(pinned),
            "busy_share": chance.random(),
        })  # fmt: skip
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def timed(action: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        action()
        samples.append(time.perf_counter() - began)
    return statistics.median(samples)


def rollup_summary(history) -> tuple[int, int]:
    """The rollup's rows and the sessions they count."""
    with history() as session:
        rows, sessions = session.execute(select(func.count(), func.sum(SessionDay.sessions))).one()
    return int(rows), int(sessions or 0)


def time_backfill(history) -> float:
    """Seconds for migration 0002 (rollup table and its backfill) over the stored sessions."""
    engine = history.kw["bind"]
    before = rollup_summary(history)
    db.downgrade(engine, "0001")
    began = time.perf_counter()
    db.upgrade(engine)
    seconds = time.perf_counter() - began
    assert rollup_summary(history) == before, "the backfill differs from the incrementally kept rollup"
    return seconds


def measure(url: str, records: int, runs: int) -> dict[str, float]:
    history = db.open_database(url)
    try:
        began = time.perf_counter()
        for batch in rows(records):
            store.insert_many(history, batch)
        filled = time.perf_counter() - began
        assert store.count(history) == records
        rollup_rows, counted = rollup_summary(history)
        assert counted == records
        window = datetime(2026, 9, 30, 13, 30)  # the last 30 days of the 90, from mid-day
        report_seconds = timed(lambda: as_text(load_report(history)), runs)
        window_seconds = timed(lambda: as_text(load_report(history, since=window)), runs)
        user_seconds = timed(lambda: store.sessions_of(history, "user7", limit=50), runs)
        backfill_seconds = time_backfill(history)
        return {
            "fill_seconds": round(filled, 1),
            "rollup_rows": rollup_rows,
            "report_median_seconds": round(report_seconds, 3),
            "report_30_days_median_seconds": round(window_seconds, 3),
            "user_sessions_median_ms": round(1000 * user_seconds, 2),
            "backfill_seconds": round(backfill_seconds, 1),
        }
    finally:
        db.close(history)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--databases", default="sqlite,postgresql")
    args = parser.parse_args()
    results: dict[str, object] = {"records": args.records, "runs": args.runs}
    for name in args.databases.split(","):
        if name == "sqlite":
            with tempfile.TemporaryDirectory(prefix="fracnb-bench-") as directory:
                results["sqlite"] = measure(f"sqlite:///{Path(directory) / 'history.sqlite'}", args.records, args.runs)
        elif name == "postgresql":
            with running_postgres() as server:
                results["postgresql"] = measure(server.url, args.records, args.runs)
        else:
            parser.error(f"unknown database {name!r}: sqlite or postgresql")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
