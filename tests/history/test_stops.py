"""The stops the service made, one record each in the session history (table fracnb_stops): what the
user reads wherever they land, in the front end's words (extension/test-data/stop-notices.json and
hibernation-notices.json), with what the hibernation before the stop saved; kept across a restart of
the service; ``api/me``'s ``stopped`` built from them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from fracnb_schemas import SERVICE_REPORT, problems
from fracnb_spawner.hibernation.client import Hibernation, checked_report
from fracnb_spawner.hibernation.culled import hibernation_json
from fracnb_spawner.history import db
from fracnb_spawner.history.stopnotices import (
    CONSEQUENCES,
    NOTHING_HELD_CONSEQUENCES,
    SAVED_CONSEQUENCES,
    StopNotice,
    latest_stops,
    newest_stop,
    notice_sentences,
    purge_stops,
    record_stop,
    stop_phrase,
)
from fracnb_spawner.service.stoppedservers import stopped_servers
from tests.shared_cases import shared_cases

NOTICES = shared_cases("stop-notices.json")
SAVED = shared_cases("hibernation-notices.json")["cases"][0]
NOW = datetime(2026, 11, 25, 14, 30, tzinfo=timezone.utc)


@pytest.mark.parametrize("case", NOTICES["cases"], ids=lambda case: f"{case['reason']}-{case['limit_seconds']}")
def test_why_reads_as_in_the_notebook(case):
    assert stop_phrase(case["reason"], case["limit_seconds"]) == case["phrase"]


def test_what_is_kept_reads_as_in_the_notebook():
    assert (NOTICES["consequences"], NOTICES["saved_consequences"], NOTICES["nothing_held_consequences"]) == (
        CONSEQUENCES,
        SAVED_CONSEQUENCES,
        NOTHING_HELD_CONSEQUENCES,
    )


def at(minute: int) -> datetime:
    return datetime(2026, 11, 25, 14, minute, tzinfo=timezone.utc)


def saved_hibernation() -> dict:
    report = checked_report({"kernels": SAVED["kernels"], "saved_bytes": 3435973837})
    return hibernation_json(Hibernation(report, None, 9.8))


def test_a_stop_says_what_its_hibernation_saved_or_could_not():
    berlin = ZoneInfo("Europe/Berlin")
    saved = StopNotice("ann", "", at(5), "idle", 900, {"hibernation": saved_hibernation()})
    assert notice_sentences(saved, ZoneInfo(SAVED["time_zone"])) == [
        f"Your server was stopped for being idle for 15 min (at 14:05 UTC). {SAVED_CONSEQUENCES}",
        *SAVED["lines"],
    ]
    silent = hibernation_json(Hibernation(None, "the server gave no answer within 135 s", 135.0))
    unanswered = StopNotice("ann", "gpu", at(5), "demand", 240, {"hibernation": silent})
    assert notice_sentences(unanswered, berlin) == [
        f"Your server 'gpu' was stopped for being idle while someone waited for a GPU (at 15:05 CET). {CONSEQUENCES}",
        "Variables not saved: the server gave no answer within 135 s.",
    ]
    cpu_only = StopNotice("ann", "", at(5), "max-age", 28800)
    assert notice_sentences(cpu_only) == [
        f"Your server was stopped at its maximum age of 8 h (at 14:05 UTC). {CONSEQUENCES}"
    ]


def test_each_stop_is_kept_across_a_restart_and_each_servers_last_one_is_told(db_url):
    history = db.open_database(db_url)
    record_stop(history, StopNotice("ann", "gpu", at(2), "idle", 900))
    record_stop(history, StopNotice("ann", "", at(1), "idle", 900))
    record_stop(history, StopNotice("ann", "", at(5), "gpu-unused", 1200, {"hibernation": saved_hibernation()}))
    record_stop(history, StopNotice("bob", "", at(3), "max-age", 28800))
    db.close(history)

    history = db.open_database(db_url)  # the service started again
    try:
        stops = latest_stops(history, "ann", now=NOW)
        assert [(stop.server, stop.stopped_at.minute, stop.reason) for stop in stops] == [
            ("", 5, "gpu-unused"),
            ("gpu", 2, "idle"),
        ]
        assert newest_stop(history, "ann", now=NOW) == stops[0]
        assert stops[0].hibernation_lines(timezone.utc) == SAVED["lines"]

        stopped = stopped_servers(stops, running={"gpu"})  # api/me: "gpu" runs again
        assert set(stopped) == {""}
        document = stopped[""]
        assert (document["reason"], document["stopped_at"]) == ("gpu-unused", "2026-11-25T14:05:00Z")
        assert document["hibernation"]["outcome"] == "partly-saved"
        assert document["hibernation"]["summary"] == SAVED["lines"]  # times in UTC
        assert problems(SERVICE_REPORT, document, "/$defs/stoppedServer", check_formats=True) == []
        plain = stopped_servers(latest_stops(history, "bob", now=NOW), running=set())[""]
        assert plain["hibernation"] is None
        assert problems(SERVICE_REPORT, plain, "/$defs/stoppedServer", check_formats=True) == []

        assert latest_stops(history, "ann", now=NOW + timedelta(days=8)) == []  # old news
        assert purge_stops(history, now=NOW + timedelta(days=1), keep_days=1) == 4
        assert newest_stop(history, "bob", now=NOW) is None
    finally:
        db.close(history)
