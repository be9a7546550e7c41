"""Session reports kept while the database is away outlive a restart of the service: they are written to
a file only the service's user can read, read back at start, and the file goes once all are stored; so do the
notices of the stops it made meanwhile."""

from __future__ import annotations

import asyncio
import stat
from datetime import datetime, timezone
from typing import Any

from jupyterhub.services.auth import HubAuth
from sqlalchemy import create_engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import sessionmaker

from fracnb_spawner.culling import CullPolicy
from fracnb_spawner.history import db
from fracnb_spawner.history.stopnotices import StopNotice, latest_stops
from fracnb_spawner.quota.config import FracnbQuotas
from fracnb_spawner.service.app import FracnbService
from fracnb_spawner.service.cullpass import CullSettings
from fracnb_spawner.service.keptreports import PendingReports
from fracnb_spawner.service.state import ServiceState


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


def bare_state() -> Any:
    """A ServiceState with nothing behind its hub and pods: only its session history is used here."""
    return ServiceState(
        hub=None, pods=None, quotas=FracnbQuotas(), settings=CullSettings(default_policy=CullPolicy(3600), warning_lead=60),
        hub_auth=HubAuth(api_url="http://127.0.0.1:1/hub/api", api_token="unused"),
    )  # fmt: skip


def test_a_stop_told_before_the_history_opens_is_written_once_it_is(tmp_path) -> None:
    state = bare_state()
    now = datetime.now(timezone.utc)
    notice = StopNotice("ann", "", now, "kueue", details={"text": "preempted; 41 variables saved"})
    asyncio.run(state.write_stop(notice))  # the service has just started: its history is still opening
    assert state.unwritten_stops == [notice]
    assert asyncio.run(state.write_unwritten_stops()) == 0  # not open yet: still kept
    state.history = db.open_database(f"sqlite:///{tmp_path / 'fracnb-service.sqlite'}")
    try:
        assert asyncio.run(state.write_unwritten_stops()) == 1
        assert state.unwritten_stops == []
        (stored,) = latest_stops(state.history, "ann", now=now)
        assert stored.details["text"] == "preempted; 41 variables saved"
    finally:
        db.close(state.history)


def test_a_stop_kept_while_the_database_is_away_outlives_a_restart(tmp_path) -> None:
    database = f"sqlite:///{tmp_path / 'fracnb-service.sqlite'}"

    def started_service() -> ServiceState:
        service = FracnbService()
        service.db_url = database
        return service.build_state()

    state = started_service()
    now = datetime.now(timezone.utc)
    notice = StopNotice("ann", "", now, "idle", 3600.0, {"hibernation": {"outcome": "saved", "saved_bytes": 1024}})
    asyncio.run(state.write_stop(notice))  # the history is not open: kept
    path = tmp_path / "fracnb-kept-reports.stops.jsonl"  # beside the kept reports
    assert state.kept_stops_file == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with path.open("a") as file:
        file.write('{"user": "cut short')  # the service died in the middle of a write

    restarted = started_service()  # the service started again, its database away
    assert restarted.unwritten_stops == [notice]
    restarted.history = sessionmaker(create_engine(f"sqlite:///{tmp_path / 'gone' / 'fracnb-service.sqlite'}"))
    assert asyncio.run(restarted.write_unwritten_stops()) == 0
    assert started_service().unwritten_stops == [notice]  # still kept, in the file too

    restarted.history = db.open_database(database)  # the database answers again
    try:
        assert asyncio.run(restarted.write_unwritten_stops()) == 1
        assert restarted.unwritten_stops == []
        assert not path.exists()
        (stored,) = latest_stops(restarted.history, "ann", now=now)
        assert (stored.reason, stored.limit_seconds, stored.hibernation) == ("idle", 3600.0, notice.hibernation)
    finally:
        db.close(restarted.history)
    assert started_service().unwritten_stops == []
