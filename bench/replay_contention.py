"""Contention on shared cards: busy cells run slower, and each researcher's day runs late by as much. Pure.

A card's compute is shared, not added to, and how depends on the backend (each run names its rule):

- **time-slicing** (the device plugin's replicas; DRA shares, whose driver shares a card by time
  slices: it refuses MPS with consumable shares): the card runs one process at a time and gives each
  busy one an equal slice, so a busy cell runs as many times slower as the card has busy holders,
  however little of the card each would use;
- **summed demand** (MPS, DRA with MPS): kernels run side by side, so busy work slows only when the
  busy holders would together use more than the card (their ``sm_demand_*`` summed), and by that sum.

Every researcher therefore keeps a clock of their own, the point their
planned day (bench/replay_model.py) has reached: it runs with the wall clock, except inside a busy
segment executed on an over-subscribed card, where one planned second takes ``stretch`` seconds.
What follows a slowed cell comes later, up to the next fixed point of the day: meetings, lunch and
going home start and end on time (the starts and ends of breaks and of sessions). When the wall
clock passes one while the researcher is behind and not waiting on a cell, their clock jumps to it:
the planned work in between is not done. So contention costs work, not longer days.

A busy segment's *slowdown* is the wall time it took over its planned length, counting only time
in which it ran on the researcher's server.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from bench.replay_measures import percentile
from bench.replay_model import Day, Kind, Parameters, Segment

BREAKS = frozenset({Kind.AWAY, Kind.LUNCH, Kind.NIGHT})


def fixed_points(segments: Sequence[Segment]) -> list[int]:
    """The times of day that do not move: breaks' starts and ends, and where sessions start and end."""
    points = set()
    for index, segment in enumerate(segments):
        if segment.kind in BREAKS:
            points |= {segment.start, segment.end}
        if index == 0 or segments[index - 1].end != segment.start:
            points.add(segment.start)
        if index == len(segments) - 1 or segments[index + 1].start != segment.end:
            points.add(segment.end)
    return sorted(points)


TIME_SLICING, SUMMED_DEMAND = "time-slicing", "summed demand"  # the contention rules
RULES = (TIME_SLICING, SUMMED_DEMAND)


def stretch_of(demand: float) -> float:
    """Summed demand: how much slower busy work runs on a card whose busy holders would use ``demand`` cards."""
    return max(1.0, demand)


def card_stretch(rule: str, demands: Sequence[float]) -> float:
    """How much slower each busy cell runs on a card whose busy holders have these ``demands``, under ``rule``."""
    if rule == TIME_SLICING:
        return float(max(1, len(demands)))
    if rule == SUMMED_DEMAND:
        return stretch_of(sum(demands))
    raise ValueError(f"unknown contention rule {rule!r}: one of {', '.join(RULES)}")


def fluid_stretch(rule: str, demands: Sequence[float], cards: int) -> float:
    """The fluid bound's stretch at one moment: busy cells with ``demands`` on ``cards`` cards, moved between
    them freely and at no cost (any work-conserving placement does no better). Time-slicing: busy cells over
    cards; summed demand: their demand over cards; never below 1."""
    if rule not in RULES:
        raise ValueError(f"unknown contention rule {rule!r}: one of {', '.join(RULES)}")
    if not demands or cards <= 0:
        return 1.0
    load = len(demands) if rule == TIME_SLICING else sum(demands)
    return max(1.0, load / cards)


@dataclass
class SegmentRun:
    """How much of one busy segment ran, and in how much wall time."""

    planned: float = 0.0
    wall: float = 0.0

    @property
    def slowdown(self) -> float:
        return self.wall / self.planned if self.planned else 1.0


@dataclass
class PersonalClock:
    """One researcher's position in their planned day, and what their busy segments cost."""

    segments: Sequence[Segment]
    now: float = 0.0
    runs: dict[int, SegmentRun] = field(default_factory=dict)  # segment index -> what ran
    _starts: list[int] = field(default_factory=list)
    _fixed: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._starts = [segment.start for segment in self.segments]
        self._fixed = fixed_points(self.segments)

    def _busy_at(self, moment: float) -> int | None:
        """The index of the busy segment containing ``moment``, if any."""
        index = bisect.bisect_right(self._starts, moment) - 1
        if index >= 0 and moment < self.segments[index].end and self.segments[index].gpu_busy:
            return index
        return None

    def _next_busy_start(self, moment: float) -> float:
        index = bisect.bisect_right(self._starts, moment)
        for segment in self.segments[index:]:
            if segment.gpu_busy:
                return segment.start
        return float("inf")

    def advance(self, wall: float, stretch: float, running: bool, wall_now: float | None = None) -> None:
        """Let ``wall`` seconds pass, up to the wall clock's ``wall_now``. ``stretch``: the slowdown of busy
        work now; ``running``: whether the researcher's server (hence the busy work) is running; busy work
        without a server is not counted."""
        self._run(wall, stretch, running)
        if wall_now is not None and self.now < wall_now and self._busy_at(self.now) is None:
            index = bisect.bisect_right(self._fixed, wall_now) - 1
            if index >= 0 and self._fixed[index] > self.now:
                self.now = float(self._fixed[index])  # a fixed point of the day came: catch up with it

    def _run(self, wall: float, stretch: float, running: bool) -> None:
        left = wall
        while left > 1e-9:
            index = self._busy_at(self.now)
            if index is None:
                step = min(left, self._next_busy_start(self.now) - self.now)
                self.now += step
                left -= step
                continue
            rate = stretch if running else 1.0
            planned = min(left / rate, self.segments[index].end - self.now)
            self.now += planned
            left -= planned * rate
            if running:
                run = self.runs.setdefault(index, SegmentRun())
                run.planned += planned
                run.wall += planned * rate

    def slowdowns(self) -> list[float]:
        return [run.slowdown for run in self.runs.values() if run.planned > 0]

    def busy_index(self) -> int | None:
        """The index of the busy segment the researcher is in now, if any."""
        return self._busy_at(self.now)


@dataclass
class FluidBound:
    """The best slowdown p95 any placement could reach on the cards a run held, under its rule: each busy
    segment, step by step, runs at the fluid stretch of its moment (:func:`fluid_stretch`)."""

    rule: str
    runs: dict[tuple[str, int], SegmentRun] = field(default_factory=dict)

    def observe(self, busy: Mapping[tuple[str, int], float], cards: int, seconds: float) -> None:
        """One step of ``seconds``: the busy segments running (key -> demand) on ``cards`` cards."""
        stretch = fluid_stretch(self.rule, list(busy.values()), cards)
        for key in busy:
            run = self.runs.setdefault(key, SegmentRun())
            run.wall += seconds
            run.planned += seconds / stretch

    def slowdowns(self) -> list[float]:
        return [run.slowdown for run in self.runs.values() if run.planned > 0]


def planned_bound(
    day: Day, params: Parameters, cards: int, rule: str, needs: Sequence[Fraction], *, step: int = 60
) -> float:
    """The fluid bound's p95 over the planned day (no feedback): the busy segments of researchers with one of
    ``needs``, all of them on a server, sharing ``cards`` cards. Checks the bound the notes estimate."""
    by_step: dict[int, dict[tuple[str, int], float]] = {}
    for researcher in (r for r in day.researchers if r.need in needs):
        for segment in researcher.segments:
            if not segment.gpu_busy:
                continue
            demand = params.sm_demand_burst if segment.kind is Kind.BURST else params.sm_demand_silent
            first = max(0, math.ceil((segment.start - step / 2) / step))
            for index in range(first, math.ceil((segment.end - step / 2) / step)):
                by_step.setdefault(index, {})[(researcher.name, segment.start)] = demand
    bound = FluidBound(rule)
    for index in sorted(by_step):
        bound.observe(by_step[index], cards, step)
    return percentile(bound.slowdowns(), 0.95)
