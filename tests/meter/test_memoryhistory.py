"""The bounded memory history behind the charts (pure), against literal readings."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from fracnb_meter.memoryhistory import KernelSample, MemoryHistory, Point, Series, compact, record_usage
from fracnb_schemas import MEMORY_HISTORY, problems

STARTED = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
GIB = 1 << 30


def test_points_in_one_bucket_keep_the_highest_and_its_time() -> None:
    points = [Point(0.0, 5), Point(0.4, 9), Point(0.9, 9), Point(1.2, 3), Point(2.5, 4), Point(2.7, 1)]
    assert compact(points, 1.0) == [Point(0.4, 9), Point(1.2, 3), Point(2.5, 4)]
    assert compact(points, 2.0) == [Point(0.4, 9), Point(2.5, 4)]


def test_a_series_rises_and_falls_point_by_point_while_it_has_room() -> None:
    series = Series(capacity=10, step_s=1.0)
    for at_s, value in [(0, 1), (1, 4), (2, 9), (3, 2), (4, 0)]:
        series.add(at_s, value * GIB)
    assert [(p.at_s, p.bytes // GIB) for p in series.points] == [(0, 1), (1, 4), (2, 9), (3, 2), (4, 0)]
    assert series.peak == Point(2, 9 * GIB)
    assert series.latest == Point(4, 0)
    assert series.as_json()["points"] == [
        {"at_s": at_s, "bytes": v * GIB} for at_s, v in [(0, 1), (1, 4), (2, 9), (3, 2), (4, 0)]
    ]


def test_a_long_session_stays_within_capacity_and_keeps_its_peak() -> None:
    series = Series(capacity=8, step_s=1.0)
    for second in range(7 * 24 * 3600 // 60):  # a week, one reading a minute
        series.add(second * 60.0, 7 * GIB if second == 5000 else (second % 10) * GIB // 10)
    assert len(series.points) <= 8
    assert series.peak == Point(5000 * 60.0, 7 * GIB)
    assert Point(5000 * 60.0, 7 * GIB) in series.points
    assert series.step_s >= 7 * 24 * 3600 / 8
    assert series.latest == Point((7 * 24 * 60 - 1) * 60.0, 9 * GIB // 10)
    times = [p.at_s for p in series.points]
    assert times == sorted(times)
    assert times[0] < 3600  # the chart still begins at the session's start
    assert series.as_json()["points"] == [point.as_json() for point in series.points]


def test_the_first_of_equal_peaks_is_the_peak() -> None:
    series = Series()
    for at_s, value in [(0, 3), (5, 3), (9, 2)]:
        series.add(at_s, value)
    assert series.peak == Point(0, 3)


def test_kernels_by_id_with_their_restart_and_departure() -> None:
    history = MemoryHistory(STARTED, capacity=10)
    history.record(0, 2 * GIB, [KernelSample("a", "train.ipynb", GIB), KernelSample("b", None, GIB)])
    history.record(1, GIB, [KernelSample("a", "train.ipynb", 0), KernelSample("b", None, GIB)])  # a restarts
    history.record(2, 3 * GIB, [KernelSample("a", "train.ipynb", 2 * GIB)])  # b is shut down
    document = history.as_json()
    assert [k["id"] for k in document["kernels"]] == ["a"]
    train = document["kernels"][0]
    assert train["carried_from"] is None
    assert [p["bytes"] // GIB for p in train["series"]["points"]] == [1, 0, 2]
    assert document["server"]["peak"] == {"at_s": 2, "bytes": 3 * GIB}
    assert document["now_s"] == 2


def test_a_new_kernel_for_the_same_notebook_continues_its_series() -> None:
    history = MemoryHistory(STARTED)
    history.record(0, GIB, [KernelSample("old", "train.ipynb", 5 * GIB), KernelSample("x", None, GIB)])
    history.record(1, 0, [])
    history.record(2, GIB, [KernelSample("new", "train.ipynb", GIB), KernelSample("y", None, GIB)])
    kernels = {k["id"]: k for k in history.as_json()["kernels"]}
    assert kernels["new"]["carried_from"] == "old"
    assert kernels["new"]["series"]["peak"] == {"at_s": 0, "bytes": 5 * GIB}
    assert [p["at_s"] for p in kernels["new"]["series"]["points"]] == [0, 2]
    # Without a notebook path the meter cannot tell it is the same kernel: a fresh series.
    assert kernels["y"]["carried_from"] is None
    assert [p["at_s"] for p in kernels["y"]["series"]["points"]] == [2]


def test_a_replacement_seen_in_the_same_reading_as_the_departure_continues() -> None:
    history = MemoryHistory(STARTED)
    history.record(0, GIB, [KernelSample("old", "train.ipynb", 5 * GIB)])
    history.record(1, GIB, [KernelSample("new", "train.ipynb", GIB)])
    (kernel,) = history.as_json()["kernels"]
    assert (kernel["id"], kernel["carried_from"]) == ("new", "old")
    assert kernel["series"]["peak"] == {"at_s": 0, "bytes": 5 * GIB}


def test_a_replacement_read_before_its_notebook_path_still_continues() -> None:
    """jupyter_server adds a kernel before its session records the path: the first reading has none."""
    history = MemoryHistory(STARTED)
    history.record(0, GIB, [KernelSample("old", "train.ipynb", 5 * GIB)])
    history.record(1, GIB, [KernelSample("new", None, GIB)])
    history.record(2, GIB, [KernelSample("new", "train.ipynb", 2 * GIB), KernelSample("z", "other.ipynb", 0)])
    kernels = {k["id"]: k for k in history.as_json()["kernels"]}
    assert (kernels["new"]["carried_from"], kernels["new"]["path"]) == ("old", "train.ipynb")
    assert kernels["new"]["series"]["peak"] == {"at_s": 0, "bytes": 5 * GIB}
    assert [p["at_s"] for p in kernels["new"]["series"]["points"]] == [0, 1, 2]
    assert (kernels["z"]["carried_from"], kernels["z"]["path"]) == (None, "other.ipynb")


def test_departed_kernels_are_bounded() -> None:
    history = MemoryHistory(STARTED, keep_departed=2)
    for number in range(5):
        history.record(number, 0, [KernelSample(f"k{number}", f"n{number}.ipynb", GIB)])
    assert list(history.departed) == ["k2", "k3"]
    history.record(9, 0, [KernelSample("again", "n0.ipynb", 0)])
    assert history.as_json()["kernels"][0]["carried_from"] is None  # n0's series was dropped


def test_unknown_figures_add_no_point() -> None:
    history = MemoryHistory(STARTED)
    history.record(0, None, [KernelSample("a", "t.ipynb", None)])
    document = history.as_json()
    assert document["server"] == {"step_s": 1.0, "peak": None, "latest": None, "points": []}
    assert document["kernels"][0]["series"]["points"] == []
    assert problems(MEMORY_HISTORY, document, check_formats=True) == []


def test_the_document_fits_its_schema() -> None:
    history = MemoryHistory(STARTED, capacity=4)
    for second in range(40):
        history.record(second * 0.5, second * GIB, [KernelSample("a", "t.ipynb", second)])
    document = history.as_json()
    assert problems(MEMORY_HISTORY, document, check_formats=True) == []
    assert document["started_at"] == "2026-03-01T12:00:00.000000+00:00"
    assert document["capacity"] == 4


def test_record_usage_reads_a_usage_document() -> None:
    usage = {
        "server": {"gpu_memory_bytes": 3 * GIB},
        "kernels": [{"id": "a", "path": "t.ipynb", "gpu_memory_bytes": GIB}],
    }
    shown = record_usage(MemoryHistory(STARTED), usage, 1.5)
    assert shown["server"]["latest"] == {"at_s": 1.5, "bytes": 3 * GIB}
    assert shown["kernels"][0]["series"]["latest"] == {"at_s": 1.5, "bytes": GIB}


@pytest.mark.parametrize(("capacity", "step_s"), [(1, 1.0), (10, 0.0)])
def test_a_history_that_could_not_hold_a_chart_is_refused(capacity: int, step_s: float) -> None:
    with pytest.raises(ValueError, match="capacity >= 2 and step_s > 0"):
        MemoryHistory(STARTED, capacity=capacity, step_s=step_s)
