"""Session reports kept while the database is away outlive a restart of the service: they are written to
a file only the service's user can read, read back at start, and the file goes once all are stored."""

from __future__ import annotations

import asyncio
import stat
from typing import Any

from sqlalchemy.exc import OperationalError

from fracnb_spawner.service.app import FracnbService
from fracnb_spawner.service.pending import PendingReports


def report(session: str, at: str, final: bool = False) -> dict[str, Any]:
    return {"session_id": session, "reported_at": at, "final": final}


def test_kept_reports_outlive_a_restart_and_go_once_stored(tmp_path) -> None:
    path = tmp_path / "kept.jsonl"
    kept = PendingReports(path=path)
    kept.keep("ann", report("s1", "2026-11-25T14:00:00Z"))
    kept.keep("ann", report("s1", "2026-11-25T14:01:00Z", final=True))  # the same session's newer one
    kept.keep("bob", report("s2", "2026-11-25T14:00:30Z"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with path.open("a") as file:
        file.write('{"user": "cut short')  # the service died in the middle of a write

    restarted = PendingReports(path=path)  # the service started again, the database still away
    assert len(restarted) == 2

    async def away(user: str, kept_report: Any) -> None:
        raise OperationalError("SELECT 1", {}, Exception("the database is away"))

    assert asyncio.run(restarted.flush(away)) == 0
    stored: list[tuple[str, Any]] = []

    async def store(user: str, kept_report: Any) -> None:
        stored.append((user, kept_report))

    again = PendingReports(path=path)  # and once more
    assert asyncio.run(again.flush(store)) == 2
    assert stored == [  # oldest kept first, each session's newest report (the final one)
        ("ann", report("s1", "2026-11-25T14:01:00Z", True)),
        ("bob", report("s2", "2026-11-25T14:00:30Z")),
    ]
    assert not path.exists()
    assert len(PendingReports(path=path)) == 0


def test_the_file_is_beside_an_sqlite_database_by_default(tmp_path) -> None:
    service = FracnbService()
    service.db_url = f"sqlite:///{tmp_path / 'fracnb-service.sqlite'}"
    assert service.kept_reports_file == str(tmp_path / "fracnb-kept-reports.jsonl")
    other = FracnbService()
    other.db_url = "postgresql+psycopg://fracnb@db/fracnb"
    assert other.kept_reports_file == ""
