"""Session statistics from readings given as literal data (sessionstats), and the report built from them."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from fracnb_meter.contract import Budget
from fracnb_meter.sessionreport import SessionIdentity, report_document, sessions_url
from fracnb_meter.sessionstats import KernelReading, Reading, SessionStats, reading_from_usage
from fracnb_schemas import SESSION_REPORT, problems

GIB = 1 << 30
BUDGET = 10 * GIB


def feed(stats: SessionStats, *readings: Reading) -> SessionStats:
    for reading in readings:
        stats.observe(reading)
    return stats


def test_peaks_that_rise_and_fall_keep_the_highest() -> None:
    stats = feed(
        SessionStats(BUDGET),
        Reading(0, 1 * GIB, (KernelReading("k1", "python3", 1 * GIB),)),
        Reading(5, 6 * GIB, (KernelReading("k1", "python3", 4 * GIB), KernelReading("k2", "python3", 2 * GIB))),
        Reading(10, 2 * GIB, (KernelReading("k1", "python3", 1 * GIB), KernelReading("k2", "python3", 1 * GIB))),
    )
    assert stats.peak_bytes == 6 * GIB
    assert stats.kernels() == [
        {"id": "k1", "name": "python3", "peak_bytes": 4 * GIB, "oom_errors": 0},
        {"id": "k2", "name": "python3", "peak_bytes": 2 * GIB, "oom_errors": 0},
    ]


def test_a_kernels_peak_survives_its_restart() -> None:
    """A restarted kernel keeps its id and starts again from no memory: its peak stays."""
    stats = feed(
        SessionStats(BUDGET),
        Reading(0, 5 * GIB, (KernelReading("k1", "python3", 5 * GIB),)),
        Reading(5, None, (KernelReading("k1", "python3", None),)),  # restarting: unknown
        Reading(10, 0, (KernelReading("k1", "python3", 0),)),
        Reading(15, 3 * GIB, (KernelReading("k1", "python3", 3 * GIB),)),
    )
    assert stats.kernels() == [{"id": "k1", "name": "python3", "peak_bytes": 5 * GIB, "oom_errors": 0}]
    assert stats.peak_bytes == 5 * GIB


def test_time_near_the_budget_counts_the_level_held_since_the_reading() -> None:
    stats = feed(
        SessionStats(BUDGET),
        Reading(0, int(0.5 * BUDGET)),
        Reading(10, int(0.85 * BUDGET)),  # 0-10 s at 50 %
        Reading(30, int(0.97 * BUDGET)),  # 10-30 s at 85 %
        Reading(35, int(0.2 * BUDGET)),  # 30-35 s at 97 %
        Reading(45, int(0.2 * BUDGET)),
    )
    assert stats.observed_seconds == 45
    assert stats.seconds_above_near == 25
    assert stats.seconds_above_full == 5


def test_a_long_gap_counts_only_up_to_max_gap() -> None:
    stats = feed(SessionStats(BUDGET, max_gap=60), Reading(0, BUDGET), Reading(3600, 0))
    assert stats.observed_seconds == stats.seconds_above_full == 60


def test_each_time_memory_reaches_the_budget_is_one_event() -> None:
    stats = feed(
        SessionStats(BUDGET),
        Reading(0, int(0.5 * BUDGET)),
        Reading(1, int(0.995 * BUDGET)),
        Reading(2, BUDGET),  # still pinned: the same event
        Reading(3, int(0.5 * BUDGET)),
        Reading(4, BUDGET),
    )
    assert stats.oom_events == 2


def test_an_error_in_a_kernel_is_an_event_and_counts_for_its_kernel() -> None:
    stats = feed(SessionStats(BUDGET), Reading(0, 2 * GIB, (KernelReading("k1", "python3", 2 * GIB),)))
    assert stats.record_oom_error("k1", "python3", "request-1")
    assert stats.record_oom_error("k2", "ir", "request-2")  # a kernel no reading has shown yet
    assert stats.oom_events == 2
    assert stats.kernels() == [
        {"id": "k1", "name": "python3", "peak_bytes": 2 * GIB, "oom_errors": 1},
        {"id": "k2", "name": "ir", "peak_bytes": None, "oom_errors": 1},
    ]


def test_one_execution_request_is_one_error_however_many_messages_show_it() -> None:
    """A traceback printed to stderr and the exception that ends the cell are one error."""
    stats = SessionStats(BUDGET)
    assert stats.record_oom_error("k1", "python3", "request-1")
    assert not stats.record_oom_error("k1", "python3", "request-1")
    assert stats.record_oom_error("k1", "python3", "request-2")
    assert stats.record_oom_error("k2", "python3", "request-2")  # another kernel's own count
    assert stats.record_oom_error("k1", "python3", None)  # output outside any request: each counts
    assert stats.record_oom_error("k1", "python3", None)
    assert (stats.oom_events, stats.kernel_peaks["k1"].oom_errors) == (5, 4)


def test_an_error_while_memory_stays_at_the_budget_is_that_event() -> None:
    stats = feed(SessionStats(BUDGET), Reading(0, GIB), Reading(1, BUDGET))
    assert stats.oom_events == 1
    stats.record_oom_error("k1", "python3", "request-1")
    assert stats.oom_events == 1  # the allocation that reached the budget failed: one failure
    stats.record_oom_error("k1", "python3", "request-2")
    assert stats.oom_events == 2  # a second failure while still at the budget
    assert stats.kernel_peaks["k1"].oom_errors == 2


def test_memory_found_at_the_budget_right_after_an_error_is_that_event() -> None:
    stats = feed(SessionStats(BUDGET), Reading(0, GIB))
    stats.record_oom_error("k1", "python3", "request-1")
    feed(stats, Reading(1, BUDGET))  # the first reading after the error
    assert stats.oom_events == 1
    stats.record_oom_error("k1", "python3", "request-2")
    assert stats.oom_events == 2


def test_an_error_long_before_memory_reaches_the_budget_is_a_separate_event() -> None:
    stats = feed(SessionStats(BUDGET), Reading(0, GIB))
    stats.record_oom_error("k1", "python3", "request-1")
    feed(stats, Reading(1, GIB), Reading(2, BUDGET))
    assert stats.oom_events == 2


def test_without_a_budget_errors_still_count() -> None:
    stats = feed(SessionStats(None), Reading(0, 80 * GIB))
    stats.record_oom_error("k1", "python3", "request-1")
    assert stats.oom_events == 1


def test_without_a_budget_only_peaks_are_known() -> None:
    stats = feed(SessionStats(None), Reading(0, 50 * GIB), Reading(10, 80 * GIB))
    assert (stats.peak_bytes, stats.seconds_above_near, stats.oom_events) == (80 * GIB, 0, 0)


def test_busy_share_is_over_the_time_with_utilisation_samples() -> None:
    stats = feed(
        SessionStats(BUDGET),
        Reading(0, 0),
        Reading(10, 0, busy=True),
        Reading(20, 0, busy=None),  # no samples for this interval
        Reading(50, 0, busy=False),
    )
    assert stats.busy_share == pytest.approx(10 / 40)
    assert SessionStats(BUDGET).busy_share is None


def test_readings_come_from_usage_documents() -> None:
    document = {
        "server": {"gpu_memory_bytes": 3 * GIB},
        "kernels": [{"id": "k1", "name": "python3", "gpu_memory_bytes": 3 * GIB, "pid": 10}],
    }
    assert reading_from_usage(document, 7.0) == Reading(7.0, 3 * GIB, (KernelReading("k1", "python3", 3 * GIB),))


def test_the_report_fits_its_schema_while_running_and_at_the_end() -> None:
    budget = Budget(fraction=0.25, memory_bytes=BUDGET, backend="time-slicing", profile="a100")
    env = {"JUPYTERHUB_SERVER_NAME": "train", "FRACNB_CHOICE": "size=quarter"}
    start = datetime(2026, 11, 1, 10, tzinfo=timezone.utc)
    identity = SessionIdentity.for_server(env, budget, start)
    stats = feed(SessionStats(BUDGET), Reading(0, GIB), Reading(30, 9 * GIB, busy=True))
    running = report_document(identity, stats, reported_at=start)
    ended = report_document(identity, stats, reported_at=start, ended_at=start)
    for document in (running, ended):
        assert problems(SESSION_REPORT, document, check_formats=True) == []
    assert running["ended_at"] is None
    assert ended["ended_at"] == "2026-11-01T10:00:00Z"
    assert (ended["server_name"], ended["choice"], ended["peak_bytes"], ended["busy_share"]) == (
        "train", "size=quarter", 9 * GIB, 1.0
    )  # fmt: skip


def test_no_service_url_means_no_reporting() -> None:
    assert sessions_url("") == ""
    assert sessions_url("ftp://hub/") == ""
    assert sessions_url("http://hub:10101/services/fracnb/") == "http://hub:10101/services/fracnb/api/sessions"
