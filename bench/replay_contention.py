"""Contention on shared cards: busy cells run slower, and each researcher's day runs late by as much. Pure.

Time-slicing shares a card's compute, it does not add any: when the busy holders of a card would
together use more than the whole card (their ``sm_demand_*`` summed), each one's busy work takes
that many times longer. Every researcher therefore keeps a clock of their own, the point their
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
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.replay_model import Kind, Segment

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


def stretch_of(demand: float) -> float:
    """How much slower busy work runs on a card whose busy holders would use ``demand`` cards."""
    return max(1.0, demand)


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
