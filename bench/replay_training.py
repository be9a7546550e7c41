"""The replay's training work: a closed-loop backlog of whole-GPU jobs. Pure: parameters and a seed in, streams out.

A *stream* is one line of training work (a researcher's experiments, a group's sweep): it submits
a job, waits for it to finish, thinks for a while, and submits the next. How many jobs a day
finish is therefore an output of the cluster, not an input. Job lengths and thinking times are
drawn once per seed, so every run sees the same work; when each job starts is up to the run.

The day starts warm: each stream's history is played from several days before 07:00 as if a card
were always free, and whatever it is doing at 07:00 (running a job with some hours left, or
thinking until some time) is where the replay starts it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol

HOUR = 3600
WARM_UP_DAYS = 5  # history played before the day so that 07:00 is a steady state
REFERENCE_HOURS_PER_CARD = 14.4  # the reference case's "before": GPU time per card per day (h)
REFERENCE_JOBS_A_WEEK = 160  # ... and training jobs a week


class Parameters(Protocol):
    """The model's training figures (bench.replay_model.Parameters has them; this module does not import it,
    so the model may import the streams)."""

    @property
    def training_streams(self) -> int: ...
    @property
    def job_hours_median(self) -> float: ...
    @property
    def job_hours_sigma(self) -> float: ...
    @property
    def job_hours_range(self) -> tuple[float, float]: ...
    @property
    def think_hours_mean(self) -> float: ...


@dataclass(frozen=True)
class TrainingJob:
    name: str
    duration: int  # seconds of work on one whole GPU


@dataclass(frozen=True)
class Stream:
    """One line of training work: its jobs in order, the thinking time after each, and its state at 07:00."""

    name: str
    jobs: tuple[TrainingJob, ...]
    thinks: tuple[int, ...]  # seconds between a job's end and the next submission
    warm_left: int  # > 0: the first job is running at 07:00 with this much left; 0: it is submitted at first_submit
    first_submit: int = 0


def _job_seconds(rng: random.Random, p: Parameters) -> int:
    hours = rng.lognormvariate(0, p.job_hours_sigma) * p.job_hours_median
    return round(min(max(hours, p.job_hours_range[0]), p.job_hours_range[1]) * HOUR)


def _think_seconds(rng: random.Random, p: Parameters) -> int:
    if p.think_hours_mean <= 0:
        return 0  # a saturating backlog: the next job is submitted as one ends
    return round(rng.expovariate(1 / (p.think_hours_mean * HOUR)))


def _warm_state(rng: random.Random, p: Parameters) -> tuple[int, int]:
    """(seconds left of a job running at 07:00, or 0; when the next job is submitted if none runs)."""
    moment = -WARM_UP_DAYS * 24 * HOUR + _think_seconds(rng, p)
    while moment < 0:
        end = moment + _job_seconds(rng, p)
        if end > 0:
            return end, 0
        moment = end + _think_seconds(rng, p)
    return 0, moment


def _stream(rng: random.Random, p: Parameters, index: int, length: int) -> Stream:
    warm_left, first_submit = _warm_state(rng, p)
    jobs, thinks, planned = [], [], 0
    # Enough work to keep the stream going all day even if every job were short.
    while planned < 2 * length + warm_left:
        job = TrainingJob(f"train-{index:02d}-{len(jobs):02d}", _job_seconds(rng, p))
        if not jobs and warm_left:
            job = TrainingJob(job.name, warm_left)
        jobs.append(job)
        thinks.append(_think_seconds(rng, p))
        planned += job.duration + thinks[-1]
    return Stream(f"train-{index:02d}", tuple(jobs), tuple(thinks), warm_left, first_submit)


def training_streams(p: Parameters, seed: int, length: int) -> tuple[Stream, ...]:
    """The day's training streams; their own random sequence, so the notebook day does not depend on them."""
    rng = random.Random(f"training-{seed}")
    return tuple(_stream(rng, p, index, length) for index in range(p.training_streams))


def offered_hours_a_day(p: Parameters, samples: int = 20_000, seed: int = 0) -> float:
    """GPU-hours a day the streams would run with a card always free: streams x mean job / (mean job + think)."""
    rng = random.Random(seed)
    mean_job = sum(_job_seconds(rng, p) for _ in range(samples)) / samples / HOUR
    return p.training_streams * 24 * mean_job / (mean_job + p.think_hours_mean)


@dataclass(frozen=True)
class Calibration:
    """A run's training side against the reference case's "before"."""

    hours_per_card: float  # occupancy hours per card per day, whole cluster
    jobs_a_week: float  # jobs finished in the day x 7

    @property
    def hours_error(self) -> float:
        return self.hours_per_card / REFERENCE_HOURS_PER_CARD - 1

    @property
    def jobs_error(self) -> float:
        return self.jobs_a_week / REFERENCE_JOBS_A_WEEK - 1

    def line(self) -> str:
        return (
            f"calibration: {self.hours_per_card:.1f} h per card per day against {REFERENCE_HOURS_PER_CARD} "
            f"({self.hours_error:+.0%}); {self.jobs_a_week:.0f} jobs a week against {REFERENCE_JOBS_A_WEEK} "
            f"({self.jobs_error:+.0%})"
        )
