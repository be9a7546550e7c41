"""The session database locked (SQLite: another process holds its write lock, as a backup or a
migration run by hand does): the service keeps the reports it cannot store, answers 202, stays up,
and stores them once the lock goes: none lost, the newest of a session kept, none counted twice."""

from __future__ import annotations

import re
import sqlite3

import pytest

from fracnb_testbed.procs import wait_until
from tests.service.calls import new_report, post, server_token, user_token
from tests.service.test_sessions_api import history_open  # noqa: F401

pytestmark = pytest.mark.faults


def allocated(hub, token: str) -> float:
    """fracnb_gpu_hours_allocated_total for the a100 profile on the service's /metrics."""
    _, text = hub.http("GET", hub.service_url + "metrics", token=token)
    found = re.search(r'^fracnb_gpu_hours_allocated_total\{profile="a100"\} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_reports_kept_while_the_database_is_locked(hub, new_user):
    user = new_user()
    token, reader = server_token(hub, user), user_token(hub, user)
    before = allocated(hub, reader)
    lock = sqlite3.connect(hub.config_file.parent / "fracnb-service.sqlite", timeout=0, isolation_level=None)
    try:
        lock.execute("BEGIN EXCLUSIVE")
        first = new_report(observed_seconds=600.0, reported="2026-11-01T10:10:00Z")
        assert post(hub, first, token)[0] == 202
        later = {**first, "observed_seconds": 1200.0, "reported_at": "2026-11-01T10:20:00Z",
                 "ended_at": "2026-11-01T10:20:00Z"}  # fmt: skip
        assert post(hub, later, token)[0] == 202
        # The service is up and reads (SQLite's WAL lets readers through a writer's lock).
        status, body = hub.http("GET", hub.service_url + "api/sessions", token=reader)
        assert (status, body["sessions"]) == (200, [])
    finally:
        lock.execute("ROLLBACK")
        lock.close()

    def stored() -> list:
        return hub.http("GET", hub.service_url + "api/sessions", token=reader)[1]["sessions"]

    wait_until(stored, what="the kept reports stored", timeout=30, interval=0.5)
    [record] = stored()
    assert (record["observed_seconds"], record["ended_at"]) == (1200.0, "2026-11-01T10:20:00Z")
    # Counted once: 0.5 GPU for 1200 s.
    assert allocated(hub, reader) - before == pytest.approx(0.5 * 1200 / 3600)
