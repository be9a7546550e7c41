"""The widget's chart (pure): geometry and words from literal series."""

from __future__ import annotations

from fracnb_meter.sparkline import Geometry, duration_words, geometry, svg, title
from fracnb_meter.testing.server import StateFile
from fracnb_meter.widget import LocalUsage, QuotaMeter, charts_html

GIB = 1 << 30


def point(at_s: float, gib: float) -> dict:
    return {"at_s": at_s, "bytes": int(gib * GIB)}


SERIES = {
    "step_s": 1.0,
    "points": [point(0, 2), point(50, 9), point(100, 4)],
    "peak": point(50, 9),
    "latest": point(100, 4),
}


def test_geometry_against_the_budget() -> None:
    # Budget 18 GiB is the top of the scale at 90 % of the height: 18 / 0.9 = 20 GiB is the box.
    shape = geometry(SERIES, now_s=200, budget_bytes=18 * GIB, width=200, height=40)
    assert shape == Geometry(200, 40, line=((0, 36), (50, 22), (100, 32)), budget_y=4, peak=(50, 22))


def test_a_peak_over_the_budget_sets_the_scale_and_the_latest_reading_ends_the_line() -> None:
    series = SERIES | {"latest": point(150, 1)}
    shape = geometry(series, now_s=150, budget_bytes=int(4.5 * GIB), width=150, height=40)
    assert shape.peak == (50, 4)  # 9 GiB at 90 % of the height
    assert shape.budget_y == 22
    assert shape.line[-1] == (150, 36)


def test_geometry_before_any_reading_and_at_time_zero() -> None:
    empty = {"step_s": 1.0, "points": [], "peak": None, "latest": None}
    assert geometry(empty, 0, None, 100, 20) == Geometry(100, 20, (), None, None)
    one = {"step_s": 1.0, "points": [point(0, 1)], "peak": point(0, 1), "latest": point(0, 1)}
    assert geometry(one, 0, None, 100, 20).line == ((100, 2),)


def test_title_says_now_peak_and_budget() -> None:
    assert title("this server", SERIES, 400, 18 * GIB) == (
        "GPU memory of this server over the last 7 min: now 4 GiB; peak 9 GiB, 6 min ago; budget 18 GiB."
    )
    latest_peak = SERIES | {"peak": point(100, 9)}
    assert "peak 9 GiB, now; no budget." in title("train.ipynb", latest_peak, 100.5, None)
    empty = {"step_s": 1.0, "points": [], "peak": None, "latest": None}
    assert title("x", empty, 3, None) == "GPU memory of x over the last 3 s: no reading yet."


def test_durations() -> None:
    assert [duration_words(s) for s in (12, 300, 7200, 86400, 3 * 86400)] == ["12 s", "5 min", "2 h", "24 h", "3 days"]


def test_svg_has_budget_line_peak_and_an_escaped_title() -> None:
    drawn = svg("<b>&", SERIES, 200, 18 * GIB)
    assert drawn.startswith('<svg class="fracnb-sparkline"')
    assert 'role="img"' in drawn
    assert "<title>GPU memory of &lt;b&gt;&amp; over the last 3 min" in drawn
    assert 'class="fracnb-sparkline-budget"' in drawn
    assert 'class="fracnb-sparkline-peak" cx="60" cy="22"' in drawn
    assert 'points="0,36 60,22 120,32"' in drawn
    no_budget = svg("x", SERIES, 200, None)
    assert "fracnb-sparkline-budget" not in no_budget


def test_the_widget_draws_this_kernel_and_this_server() -> None:
    history = {
        "started_at": "2026-03-01T12:00:00.000000+00:00",
        "now_s": 200,
        "capacity": 120,
        "server": SERIES,
        "kernels": [{"id": "this-kernel", "path": None, "carried_from": None, "series": SERIES}],
    }
    document = {"available": True, "budget": {"memory_bytes": 18 * GIB}, "history": history}
    drawn = charts_html(document)
    assert drawn.count("<svg") == 2
    assert "GPU memory of this kernel over the last 3 min" in drawn
    assert "GPU memory of this server over the last 3 min" in drawn
    assert charts_html(document | {"history": None}) == ""
    assert charts_html(document | {"available": False}) == ""


def test_the_widget_shows_its_charts_from_its_own_readings(nvml_state: StateFile) -> None:
    meter = QuotaMeter(LocalUsage(floor_seconds=0.0))
    try:
        meter.refresh()
        meter.refresh()
        assert meter.charts.value.count('class="fracnb-sparkline"') == 2
        assert meter.charts.layout.display == ""
    finally:
        meter.close()
