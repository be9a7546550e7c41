"""The training backlog: closed-loop streams that start warm, and the calibration line."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.replay_jobs import BatchQueue
from bench.replay_model import Parameters
from bench.replay_training import Calibration, Stream, TrainingJob, offered_hours_a_day, training_streams

HOUR = 3600


def test_streams_are_seeded_warm_and_have_work_for_the_whole_day() -> None:
    params = Parameters()
    streams = training_streams(params, 1, 24 * HOUR)
    assert streams == training_streams(params, 1, 24 * HOUR)
    assert streams != training_streams(params, 2, 24 * HOUR)
    assert len(streams) == params.training_streams
    running = [s for s in streams if s.warm_left]
    assert 0 < len(running) < len(streams)  # warm: some jobs already run at 07:00, some streams think
    for stream in streams:
        assert len(stream.jobs) == len(stream.thinks)
        assert sum(j.duration for j in stream.jobs) + sum(stream.thinks) >= 24 * HOUR
        if stream.warm_left:
            assert stream.jobs[0].duration == stream.warm_left
        else:
            assert stream.first_submit >= 0
        low, high = params.job_hours_range
        assert all(low * HOUR <= j.duration <= high * HOUR for j in stream.jobs[1:])


def test_the_offered_load_is_about_the_reference_before() -> None:
    # 20 streams of 13.2 h jobs with 8 h between: about 300 GPU-hours a day, 23 jobs.
    assert offered_hours_a_day(Parameters()) == pytest.approx(300, rel=0.05)
    assert offered_hours_a_day(replace(Parameters(), think_hours_mean=0)) == pytest.approx(480, rel=0.01)


def test_a_stream_thinks_between_jobs_and_a_preempted_job_goes_back_with_the_work_it_had_left() -> None:
    stream = Stream(
        "s", (TrainingJob("s-a", 3 * HOUR), TrainingJob("s-b", HOUR)), (HOUR, HOUR), warm_left=0, first_submit=600
    )
    queue = BatchQueue((stream,))
    assert queue.due(0) == []
    assert queue.due(600) == ["s-a-1"]
    queue.observe(600, running=set(), present={"s-a-1"})  # pending
    queue.observe(1200, running={"s-a-1"}, present={"s-a-1"})
    queue.observe(1200 + HOUR, running=set(), present=set())  # gone while running: preempted after an hour
    assert queue.preempted == 1
    assert queue.due(1200 + HOUR) == ["s-a-2"]
    queue.observe(1200 + HOUR, running={"s-a-2"}, present={"s-a-2"})
    assert queue.finished(1200 + 2 * HOUR) == []
    assert queue.finished(1200 + 3 * HOUR) == ["s-a-2"]  # the two hours it had left
    assert queue.finished_jobs == 1
    assert queue.due(1200 + 4 * HOUR - 1) == []  # thinking for an hour
    assert queue.due(1200 + 4 * HOUR) == ["s-b-1"]


def test_the_calibration_line_gives_the_error_against_the_reference() -> None:
    calibration = Calibration(hours_per_card=15.84, jobs_a_week=140)
    assert calibration.hours_error == pytest.approx(0.1)
    assert calibration.jobs_error == pytest.approx(-0.125)
    assert calibration.line() == (
        "calibration: 15.8 h per card per day against 14.4 (+10%); 140 jobs a week against 160 (-12%)"
    )


def test_a_stopped_job_keeps_the_work_of_its_last_checkpoint_and_the_rest_is_redone() -> None:
    stream = Stream("s", (TrainingJob("s-a", 3 * HOUR), TrainingJob("s-b", HOUR)), (0, 0), warm_left=0)
    queue = BatchQueue((stream,), checkpoint=30 * 60)
    assert queue.due(0) == ["s-a-1"]
    queue.observe(0, running={"s-a-1"}, present={"s-a-1"})
    assert queue.since_checkpoint("s-a-1", 50 * 60) == 20 * 60
    queue.observe(50 * 60, running=set(), present=set())  # preempted after 50 min: 30 kept, 20 redone
    assert (queue.preempted, queue.redone) == (1, 20 * 60)
    assert queue.due(50 * 60) == ["s-a-2"]
    queue.observe(HOUR, running={"s-a-2"}, present={"s-a-2"})
    queue.reclaimed("s-a-2", HOUR + 10 * 60)  # taken back after 10 min: all of it redone
    assert (queue.reclaimed_jobs, queue.redone) == (1, 30 * 60)
    assert queue.due(HOUR + 10 * 60) == ["s-a-3"]
    queue.observe(2 * HOUR, running={"s-a-3"}, present={"s-a-3"})
    assert queue.finished(2 * HOUR + 150 * 60 - 1) == []
    assert queue.finished(2 * HOUR + 150 * 60) == ["s-a-3"]  # 3 h less the 30 min kept


def test_a_waiting_job_moves_to_a_lent_pool_under_a_new_pod_and_comes_back_to_training_when_stopped() -> None:
    stream = Stream("s", (TrainingJob("s-a", HOUR),), (0,), warm_left=0)
    queue = BatchQueue((stream,), checkpoint=30 * 60)
    assert queue.due(0) == ["s-a-1"]
    assert queue.pool_of("s-a-1") == "training"
    moved = queue.move("s-a-1", "development")
    assert (moved, queue.pool_of(moved), queue.pods()) == ("s-a-2", "development", ["s-a-2"])
    queue.observe(60, running={moved}, present={moved})
    queue.reclaimed(moved, 120)
    assert queue.due(120) == ["s-a-3"]
    assert queue.pool_of("s-a-3") == "training"


def test_the_saturating_backlog_has_more_streams_than_cards_and_no_thinking() -> None:
    from bench.replay_model import SATURATING_STREAMS, saturating_backlog

    params = saturating_backlog(Parameters())
    assert (params.training_streams, params.think_hours_mean) == (SATURATING_STREAMS, 0.0)
    assert SATURATING_STREAMS > 32  # the reference cluster's cards
    streams = training_streams(params, 1, 24 * HOUR)
    assert all(set(s.thinks) == {0} for s in streams)
    assert all(s.warm_left for s in streams)  # no thinking: every stream has a job at 07:00
