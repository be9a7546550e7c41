"""Contention: each researcher's own clock, slowed through busy cells on an over-subscribed card."""

from __future__ import annotations

import pytest

from bench.replay_contention import PersonalClock, fixed_points, stretch_of
from bench.replay_model import Kind, Segment

DAY = (
    Segment(0, 600, Kind.EDIT),
    Segment(600, 900, Kind.BURST),
    Segment(900, 1500, Kind.EDIT),
    Segment(1500, 2100, Kind.SILENT),
    Segment(2100, 3000, Kind.AWAY),
)


def test_a_card_slows_busy_work_only_when_its_busy_holders_would_use_more_than_it() -> None:
    assert stretch_of(0.0) == 1.0
    assert stretch_of(0.8) == 1.0
    assert stretch_of(1.6) == 1.6


def test_without_contention_the_clock_keeps_the_wall_clocks_time() -> None:
    clock = PersonalClock(DAY)
    for _ in range(50):
        clock.advance(60, 1.0, running=True)
    assert clock.now == 3000
    assert clock.slowdowns() == [1.0, 1.0]


def test_a_slowed_cell_takes_longer_and_everything_after_it_comes_later() -> None:
    clock = PersonalClock(DAY)
    clock.advance(600, 2.0, running=True)  # editing: no slower
    assert clock.now == 600
    clock.advance(300, 2.0, running=True)  # half of the 300 s burst
    assert clock.now == 750
    clock.advance(400, 2.0, running=True)  # the burst's other half (300 s), then 100 s of editing
    assert clock.now == pytest.approx(1000)
    assert clock.slowdowns() == [2.0]
    clock.advance(500, 1.0, running=True)  # into the silent cell, now at full speed
    assert clock.now == pytest.approx(1500 + 0)
    clock.advance(600, 1.5, running=True)
    assert clock.now == pytest.approx(1900)
    clock.advance(10_000, 1.0, running=True)
    assert clock.slowdowns() == pytest.approx([2.0, (600 + 200) / 600])


def test_busy_work_without_a_server_runs_on_the_plan_and_is_not_counted() -> None:
    clock = PersonalClock(DAY)
    clock.advance(1200, 3.0, running=False)
    assert clock.now == 1200
    assert clock.slowdowns() == []


def test_breaks_and_leaving_stay_on_time_and_the_work_left_before_them_is_not_done() -> None:
    assert fixed_points(DAY) == [0, 2100, 3000]
    clock = PersonalClock(DAY)
    clock.advance(900, 1.0, running=True, wall_now=900)
    clock.advance(600, 1.0, running=True, wall_now=1500)
    assert clock.now == 1500  # on plan: the silent cell starts
    clock.advance(600, 2.0, running=True, wall_now=2100)  # half the cell done at the meeting's start
    assert clock.now == 1800  # a cell is not abandoned: it runs on into the meeting
    clock.advance(600, 2.0, running=True, wall_now=2700)
    assert clock.now == 2100  # the cell ended (twice as long): into the meeting, 10 minutes late ...
    clock.advance(300, 1.0, running=True, wall_now=3000)
    assert clock.now == 3000  # ... which ends on time all the same
    lunch_stop = (Segment(0, 600, Kind.BURST), Segment(600, 1200, Kind.EDIT), Segment(3600, 4200, Kind.EDIT))
    assert fixed_points(lunch_stop) == [0, 1200, 3600, 4200]
    clock = PersonalClock(lunch_stop)
    clock.advance(1200, 1.5, running=True, wall_now=1200)  # the burst took 900 s of the 1200
    assert clock.now == 1200  # leaving for lunch on time: the last 300 s of editing are not done
