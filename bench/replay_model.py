"""The replay's workload: a seeded model of a research group's day. Pure: parameters and a seed in, a ``Day`` out.

Every figure lives in :class:`Parameters`, and :data:`SOURCES` says where each comes from: the
reference case (an AI platform vendor's published case study, as issue 14 quotes it), a fact of
the software, or "assumption" where no source exists. Times are seconds since the simulated
day's start (07:00); :func:`clock` turns a time of day into that.

A researcher's day is a list of sessions, each a run of segments that say what the researcher
and their kernel do: editing (GPU idle, JupyterLab open and visible), short GPU bursts with
output, long silent training cells (GPU busy, nothing printed; the tab often hidden), meetings
and lunch (tab hidden, GPU idle), and the night for servers left running. Training work is a
closed-loop backlog of whole-GPU jobs around the clock (bench/replay_training.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, fields, replace
from enum import Enum
from fractions import Fraction

from bench.replay_training import Stream, training_streams

DAY_START_HOUR = 7
HOUR = 3600
MINUTE = 60


def clock(hour: float) -> int:
    """Seconds since the day's start (07:00) of a time of day in hours (13.5 = 13:30)."""
    return round((hour - DAY_START_HOUR) * HOUR)


class Kind(str, Enum):
    EDIT = "edit"  # at the notebook, kernel idle: the open tab's polls are activity
    BURST = "burst"  # a short cell using the GPU, with output
    SILENT = "silent"  # a long training cell that prints nothing
    AWAY = "away"  # a meeting or a coffee: tab hidden, kernel idle
    LUNCH = "lunch"
    NIGHT = "night"  # gone home, the server left running


GPU_BUSY_KINDS = frozenset({Kind.BURST, Kind.SILENT})


@dataclass(frozen=True)
class Segment:
    start: int
    end: int
    kind: Kind
    tab_visible: bool = False  # for SILENT cells: whether the researcher watches the (silent) tab

    @property
    def gpu_busy(self) -> bool:
        return self.kind in GPU_BUSY_KINDS

    @property
    def user_active(self) -> bool:
        """Whether jupyter_server sees requests from the researcher (an open, visible tab polls)."""
        return self.kind in (Kind.EDIT, Kind.BURST) or (self.kind is Kind.SILENT and self.tab_visible)

    @property
    def wants_server(self) -> bool:
        """Whether a researcher who finds no server at this point starts one (they are at the desk)."""
        return self.user_active


@dataclass(frozen=True)
class Session:
    """One stretch with a server: started at the first segment, stopped after the last if ``stops``."""

    segments: tuple[Segment, ...]
    stops: bool

    @property
    def start(self) -> int:
        return self.segments[0].start

    @property
    def end(self) -> int:
        return self.segments[-1].end


@dataclass(frozen=True)
class Researcher:
    name: str
    group: str
    need: Fraction  # the GPU share their work needs: 1/8, 1/2 or 1
    sessions: tuple[Session, ...]

    def segment_at(self, moment: float) -> Segment | None:
        for session in self.sessions:
            for segment in session.segments:
                if segment.start <= moment < segment.end:
                    return segment
        return None

    @property
    def segments(self) -> tuple[Segment, ...]:
        return tuple(segment for session in self.sessions for segment in session.segments)


@dataclass(frozen=True)
class Day:
    length: int
    researchers: tuple[Researcher, ...]
    streams: tuple[Stream, ...]
    groups: tuple[str, ...]

    def members(self, group: str) -> list[str]:
        return [r.name for r in self.researchers if r.group == group]


@dataclass(frozen=True)
class Parameters:
    """Every figure of the model; :data:`SOURCES` gives each one's origin. Times are hours of the day."""

    groups: int = 5
    researchers_per_group: int = 10
    group_quota_gpus: int = 6
    day_hours: float = 24.0
    arrival_mean: float = 9.0
    arrival_sd: float = 0.75
    arrival_range: tuple[float, float] = (7.5, 11.0)
    departure_mean: float = 17.75
    departure_sd: float = 0.75
    departure_range: tuple[float, float] = (15.5, 20.5)
    lunch_mean: float = 12.25
    lunch_sd: float = 0.33
    lunch_minutes: tuple[float, float] = (35, 70)
    stops_for_lunch: float = 0.1
    meetings_per_day: float = 1.5
    meeting_minutes: tuple[float, float] = (30, 75)
    edit_minutes_mean: float = 12.0
    burst_minutes: tuple[float, float] = (1, 6)
    silent_cell_chance: float = 0.08
    silent_cell_minutes: tuple[float, float] = (20, 90)
    silent_tab_visible: float = 0.3
    leaves_server_running: float = 0.3
    overnight_cell_chance: float = 0.3
    overnight_cell_hours: tuple[float, float] = (2, 6)
    need_shares: tuple[tuple[Fraction, float], ...] = (
        (Fraction(1, 8), 0.8),
        (Fraction(1, 2), 0.15),
        (Fraction(1), 0.05),
    )
    training_streams: int = 20
    job_hours_median: float = 11.0
    job_hours_sigma: float = 0.6
    job_hours_range: tuple[float, float] = (2.0, 36.0)
    think_hours_mean: float = 8.0
    checkpoint_minutes: float = 30.0
    sm_demand_burst: float = 0.5
    sm_demand_silent: float = 0.8
    sm_demand_job: float = 0.65


_REFERENCE = "reference case (issue 14)"
SOURCES: dict[str, str] = {
    "groups": f"{_REFERENCE}: 50 developers in 5 groups of 10",
    "researchers_per_group": f"{_REFERENCE}: 50 developers in 5 groups of 10",
    "group_quota_gpus": f"{_REFERENCE}: group quotas of 6 GPUs",
    "day_hours": "one whole day, so servers left overnight and evening jobs count",
    "arrival_mean": "assumption: office hours",
    "arrival_sd": "assumption",
    "arrival_range": "assumption",
    "departure_mean": "assumption: office hours",
    "departure_sd": "assumption",
    "departure_range": "assumption",
    "lunch_mean": "assumption",
    "lunch_sd": "assumption",
    "lunch_minutes": "assumption",
    "stops_for_lunch": "assumption: few stop their server for lunch",
    "meetings_per_day": "assumption",
    "meeting_minutes": "assumption",
    "edit_minutes_mean": "assumption: editing between runs (exponential)",
    "burst_minutes": "assumption: short GPU cells",
    "silent_cell_chance": "assumption: share of runs that are long training cells",
    "silent_cell_minutes": "assumption",
    "silent_tab_visible": "assumption: most hide the tab or leave during a long cell",
    "leaves_server_running": "assumption (issue 14: users who leave servers running overnight)",
    "overnight_cell_chance": "assumption: of those, who leave a long cell running",
    "overnight_cell_hours": "assumption",
    "need_shares": "assumption (issue 14: most fit 1/8, some need 1/2 or a whole GPU)",
    "training_streams": "calibration: lines of training work, each with one job queued or running at a time",
    "job_hours_median": f"{_REFERENCE}, back-solved: 160 jobs a week and 14.4 h per card per day give about "
    "13 GPU-hours a job (log-normal, mean 13.2 h)",
    "job_hours_sigma": "assumption",
    "job_hours_range": "assumption",
    "think_hours_mean": "calibration: with 20 streams, about 23 jobs (300 GPU-hours) a day on 16 cards, "
    "the reference's 160 a week (exponential)",
    "checkpoint_minutes": "assumption (issue 26: a training job checkpoints every 30 min; a preempted or reclaimed "
    "job redoes the work since its last checkpoint)",
    "sm_demand_burst": "assumption: share of a card's compute a short cell keeps busy",
    "sm_demand_silent": "assumption: share of a card's compute a training cell keeps busy",
    "sm_demand_job": f"{_REFERENCE}, back-solved: 30 % utilisation before needs about 0.65",
}


def quick_parameters() -> Parameters:
    """A reduced day for CI: one group of 6 with a quota of 4 GPUs and 4 training streams, the same shape of day."""
    return Parameters(groups=1, researchers_per_group=6, group_quota_gpus=4, training_streams=4)


def busy_parameters() -> Parameters:
    """The busy day: 80 researchers in 8 groups of 10 on the same cluster, so that starts find their kind full."""
    return Parameters(groups=8)


SATURATING_STREAMS = 40  # more lines of work than the cluster's 32 cards: a job always waits


def saturating_backlog(p: Parameters) -> Parameters:
    """The same day with a saturating training backlog: more streams than cards, each submitting its next job
    as soon as one ends, so whatever capacity is free, a training job waits for it."""
    return replace(p, training_streams=max(p.training_streams, SATURATING_STREAMS), think_hours_mean=0.0)


def check_sources(parameters: type[Parameters] = Parameters) -> list[str]:
    """Parameters without a source line (an empty list when every figure has one)."""
    return [f.name for f in fields(parameters) if not SOURCES.get(f.name)]


def _bounded_normal(rng: random.Random, mean: float, sd: float, bounds: tuple[float, float]) -> float:
    return min(max(rng.gauss(mean, sd), bounds[0]), bounds[1])


def _uniform(rng: random.Random, bounds: tuple[float, float]) -> float:
    return rng.uniform(*bounds)


def _need(rng: random.Random, shares: tuple[tuple[Fraction, float], ...]) -> Fraction:
    needs, weights = zip(*shares, strict=True)
    return rng.choices(needs, weights=weights)[0]


def _work(rng: random.Random, p: Parameters, start: int, end: int) -> list[Segment]:
    """Editing alternating with GPU runs (short bursts or long silent cells) from ``start`` to ``end``.

    A silent cell started shortly before ``end`` runs on past it, unwatched: the researcher
    leaves for the break with the cell running (the break starts when the cell ends).
    """
    segments: list[Segment] = []
    moment = start
    while moment < end:
        edit = max(MINUTE, round(rng.expovariate(1 / (p.edit_minutes_mean * MINUTE))))
        segments.append(Segment(moment, min(moment + edit, end), Kind.EDIT))
        moment += edit
        if moment >= end:
            break
        if rng.random() < p.silent_cell_chance:
            length = round(_uniform(rng, p.silent_cell_minutes) * MINUTE)
            visible = rng.random() < p.silent_tab_visible and moment + length <= end
            segments.append(Segment(moment, moment + length, Kind.SILENT, tab_visible=visible))
        else:
            length = round(_uniform(rng, p.burst_minutes) * MINUTE)
            segments.append(Segment(moment, min(moment + length, end), Kind.BURST))
        moment += length
    return segments


def _breaks(rng: random.Random, p: Parameters, arrive: int, leave: int) -> list[tuple[int, int, Kind]]:
    """Lunch and meetings inside the working day, sorted and not overlapping."""
    lunch = clock(rng.gauss(p.lunch_mean, p.lunch_sd))
    breaks = [(lunch, lunch + round(_uniform(rng, p.lunch_minutes) * MINUTE), Kind.LUNCH)]
    meetings = min(4, round(rng.expovariate(1 / p.meetings_per_day))) if p.meetings_per_day > 0 else 0
    for _ in range(meetings):
        begin = rng.randrange(arrive, max(arrive + 1, leave - HOUR))
        breaks.append((begin, begin + round(_uniform(rng, p.meeting_minutes) * MINUTE), Kind.AWAY))
    kept: list[tuple[int, int, Kind]] = []
    for planned, end, kind in sorted(breaks):
        begin = max(planned, kept[-1][1] if kept else arrive)
        if begin + MINUTE < min(end, leave):
            kept.append((begin, min(end, leave), kind))
    return kept


def _sessions(rng: random.Random, p: Parameters, length: int) -> tuple[Session, ...]:
    arrive = clock(_bounded_normal(rng, p.arrival_mean, p.arrival_sd, p.arrival_range))
    leave = clock(_bounded_normal(rng, p.departure_mean, p.departure_sd, p.departure_range))
    leave = min(max(leave, arrive + 4 * HOUR), length)
    sessions: list[Session] = []
    current: list[Segment] = []
    moment = arrive
    for planned, end, kind in _breaks(rng, p, arrive, leave):
        current += _work(rng, p, moment, planned)
        begin = max(planned, current[-1].end if current else planned)
        if begin >= end:
            moment = begin
            continue
        if kind is Kind.LUNCH and rng.random() < p.stops_for_lunch:
            if current:
                sessions.append(Session(tuple(current), stops=True))
            current = []
        else:
            current.append(Segment(begin, end, kind))
        moment = end
    current += _work(rng, p, moment, leave)
    leave = min(max(leave, current[-1].end if current else leave), length)
    if rng.random() < p.leaves_server_running and leave < length:
        night_from = leave
        if rng.random() < p.overnight_cell_chance:
            night_from = min(leave + round(_uniform(rng, p.overnight_cell_hours) * HOUR), length)
            current.append(Segment(leave, night_from, Kind.SILENT, tab_visible=False))
        if night_from < length:
            current.append(Segment(night_from, length, Kind.NIGHT))
        sessions.append(Session(tuple(current), stops=False))
    elif current:
        sessions.append(Session(tuple(current), stops=True))
    return tuple(s for s in sessions if s.segments)


def generate_day(p: Parameters, seed: int) -> Day:
    """The researchers and training streams of one day; the same parameters and seed give the same day."""
    rng = random.Random(seed)
    length = round(p.day_hours * HOUR)
    groups = tuple(f"g{g + 1}" for g in range(p.groups))
    researchers = []
    for group in groups:
        for index in range(p.researchers_per_group):
            name = f"{group}-r{index + 1:02d}"
            need = _need(rng, p.need_shares)
            researchers.append(Researcher(name, group, need, _sessions(rng, p, length)))
    return Day(length, tuple(researchers), training_streams(p, seed, length), groups)
