"""Each user's share of busy time, as placement reads it from the session history: weighted by observed
time, over recent sessions only, and every user's together for users without history."""

from __future__ import annotations

from datetime import datetime

import pytest

from fracnb_spawner.history import store
from tests.history.records import report


def test_busy_shares_weigh_sessions_by_their_observed_time_and_skip_old_ones(history) -> None:
    store.store_report(history, "ann", report("a" * 32, observed_seconds=3000.0, busy_share=0.9))
    store.store_report(history, "ann", report("b" * 32, observed_seconds=1000.0, busy_share=0.1))
    store.store_report(history, "bob", report("c" * 32, observed_seconds=4000.0, busy_share=0.0))
    old = report("d" * 32, started="2026-09-01T10:00:00Z", reported="2026-09-01T11:00:00Z", busy_share=1.0)
    store.store_report(history, "bob", old)
    store.store_report(history, "cat", report("e" * 32, busy_share=None))  # the meter did not say
    shares, average = store.busy_shares(history, ["ann", "bob", "cat", "dan"], since=datetime(2026, 10, 1))
    assert shares == pytest.approx({"ann": 0.7, "bob": 0.0})  # (0.9*3000 + 0.1*1000) / 4000
    assert average == pytest.approx(0.35)  # 2800 busy of 8000 observed seconds


def test_no_history_has_no_average(history) -> None:
    assert store.busy_shares(history, ["ann"], since=datetime(2026, 10, 1)) == ({}, None)
    assert store.busy_shares(history, [], since=datetime(2026, 10, 1)) == ({}, None)
