"""The replay's workload model: literal segments, and the shape of generated days."""

from __future__ import annotations

import itertools
from dataclasses import fields, replace
from fractions import Fraction

from bench.replay_model import (
    SOURCES,
    Kind,
    Parameters,
    Researcher,
    Segment,
    Session,
    busy_parameters,
    check_sources,
    clock,
    generate_day,
    quick_parameters,
)


def test_clock_counts_from_seven_in_the_morning() -> None:
    assert clock(7) == 0
    assert clock(9.5) == 9000
    assert clock(31) == 86400


def test_what_each_kind_of_segment_means_for_the_gpu_and_the_hub() -> None:
    cases = {
        Segment(0, 60, Kind.EDIT): (False, True),
        Segment(0, 60, Kind.BURST): (True, True),
        Segment(0, 60, Kind.SILENT): (True, False),
        Segment(0, 60, Kind.SILENT, tab_visible=True): (True, True),
        Segment(0, 60, Kind.AWAY): (False, False),
        Segment(0, 60, Kind.LUNCH): (False, False),
        Segment(0, 60, Kind.NIGHT): (False, False),
    }
    for segment, (busy, active) in cases.items():
        assert (segment.gpu_busy, segment.user_active, segment.wants_server) == (busy, active, active), segment


def test_segment_at_finds_the_segment_and_nothing_between_sessions() -> None:
    morning = Session((Segment(0, 600, Kind.EDIT), Segment(600, 900, Kind.BURST)), stops=True)
    afternoon = Session((Segment(1800, 2400, Kind.EDIT),), stops=False)
    researcher = Researcher("g1-r01", "g1", Fraction(1, 8), (morning, afternoon))
    assert researcher.segment_at(0).kind is Kind.EDIT
    assert researcher.segment_at(600).kind is Kind.BURST
    assert researcher.segment_at(1200) is None
    assert researcher.segment_at(2399).kind is Kind.EDIT
    assert researcher.segment_at(2400) is None
    assert (afternoon.start, afternoon.end, morning.end) == (1800, 2400, 900)


def test_every_parameter_has_a_source_or_is_called_an_assumption() -> None:
    assert check_sources() == []
    assert set(SOURCES) == {f.name for f in fields(Parameters)}
    assert SOURCES["group_quota_gpus"].startswith("reference case")
    assert all(source.strip() for source in SOURCES.values())


def test_the_same_seed_gives_the_same_day_and_another_seed_another() -> None:
    params = quick_parameters()
    assert generate_day(params, 7) == generate_day(params, 7)
    assert generate_day(params, 7) != generate_day(params, 8)


def test_the_training_streams_do_not_change_the_notebook_day() -> None:
    params = quick_parameters()
    assert generate_day(params, 7).researchers == generate_day(replace(params, training_streams=9), 7).researchers


def test_the_busy_day_has_more_researchers_on_the_same_model() -> None:
    assert len(generate_day(busy_parameters(), 1).researchers) == 80


def test_a_generated_day_has_the_reference_population_and_ordered_segments() -> None:
    params = Parameters()
    day = generate_day(params, 1)
    assert len(day.researchers) == 50
    assert day.groups == ("g1", "g2", "g3", "g4", "g5")
    assert all(len(day.members(g)) == 10 for g in day.groups)
    assert {r.need for r in day.researchers} <= {Fraction(1, 8), Fraction(1, 2), Fraction(1)}
    assert sum(r.need == Fraction(1, 8) for r in day.researchers) > 30  # most fit 1/8
    for researcher in day.researchers:
        segments = [s for session in researcher.sessions for s in session.segments]
        assert segments, researcher.name
        assert all(s.start < s.end for s in segments)
        assert all(a.end <= b.start for a, b in itertools.pairwise(segments))
        assert segments[0].start >= clock(params.arrival_range[0])
        assert segments[-1].end <= day.length
    lunches = [
        r for r in day.researchers if len(r.sessions) > 1 or any(s.kind is Kind.LUNCH for s in r.sessions[0].segments)
    ]
    assert len(lunches) > 40  # the rest run a long cell through lunch
    left_running = [r for r in day.researchers if not r.sessions[-1].stops]
    assert left_running
    assert all(r.sessions[-1].segments[-1].end == day.length for r in left_running)
    assert len(day.streams) == params.training_streams


def test_switched_off_features_leave_no_trace() -> None:
    params = replace(
        Parameters(groups=1, researchers_per_group=4),
        leaves_server_running=0.0,
        silent_cell_chance=0.0,
        meetings_per_day=0.0,
        stops_for_lunch=1.0,
        training_streams=0,
        need_shares=((Fraction(1, 8), 1.0),),
    )
    day = generate_day(params, 3)
    assert day.streams == ()
    for researcher in day.researchers:
        assert researcher.need == Fraction(1, 8)
        assert len(researcher.sessions) == 2
        assert all(s.stops for s in researcher.sessions)
        kinds = {s.kind for session in researcher.sessions for s in session.segments}
        assert kinds == {Kind.EDIT, Kind.BURST}
