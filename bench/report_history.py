"""``fracnb-report`` over a million session records, on SQLite and on PostgreSQL.

Each database is created empty and migrated as the service does, then filled with
``--records`` sessions (default 1,000,000) spread over 2,000 users and the choices of two
profiles, with peaks drawn around a typical share of each budget. Timed, ``--runs`` times each:

- the report as ``fracnb-report`` builds it (both aggregate queries and the text output);
- one user's newest sessions, as the spawn form's advice reads them.

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

from fracnb_spawner.service.history import db, store
from fracnb_spawner.service.history.report import as_text, load_report
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


def measure(url: str, records: int, runs: int) -> dict[str, float]:
    history = db.open_database(url)
    try:
        began = time.perf_counter()
        for batch in rows(records):
            store.insert_many(history, batch)
        filled = time.perf_counter() - began
        assert store.count(history) == records
        report_seconds = timed(lambda: as_text(load_report(history)), runs)
        user_seconds = timed(lambda: store.sessions_of(history, "user7", limit=50), runs)
        return {
            "fill_seconds": round(filled, 1),
            "report_median_seconds": round(report_seconds, 3),
            "user_sessions_median_ms": round(1000 * user_seconds, 2),
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
