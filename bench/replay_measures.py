"""What the replay measures, pure: figures per step from who holds which card, then the day's summary.

One step is a snapshot: every pod holding (part of) a card, whether its work keeps the GPU busy
and how much of the card's compute that work would use (the model's ``sm_demand_*``).

- A card is **in use** while at least one of its holders is busy.
- **Modelled utilisation** of a card is the compute its busy holders would use together,
  capped at the whole card (time-slicing shares the card, it does not add compute).
- **Allocated but idle** GPU-hours: each holder's share of a card, times the time it is not busy.
- **Stranded**: free capacity on cards that are partly held. A whole-GPU job cannot use it;
  only another share of the same size can. Averaged over the day, as a share of all cards.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

DAY = 86400


@dataclass(frozen=True)
class Holder:
    """One pod on one card at one moment."""

    card: str
    pool: str
    share: Fraction
    busy: bool
    demand: float = 0.0
    notebook: bool = True


@dataclass(frozen=True)
class StepFigures:
    moment: int
    allocated: float  # GPUs held (shares summed)
    busy_cards: int
    idle_allocated: float  # GPUs held by holders that are not busy
    utilisation: float  # sum over cards of the capped compute in use
    dev_utilisation: float
    notebooks: int
    dev_notebooks: int
    dev_cards_held: int
    stranded: float  # free GPUs on partly held cards
    dev_idle_allocated: float = 0.0  # the part of idle_allocated on development GPUs


def step_figures(moment: int, holders: Iterable[Holder], dev_pool: str = "development") -> StepFigures:
    """The figures of one snapshot."""
    holders = list(holders)
    held: dict[str, Fraction] = {}
    demand: dict[str, float] = {}
    pool_of: dict[str, str] = {}
    for holder in holders:
        held[holder.card] = held.get(holder.card, Fraction(0)) + holder.share
        pool_of[holder.card] = holder.pool
        if holder.busy:
            demand[holder.card] = demand.get(holder.card, 0.0) + holder.demand
    capped = {card: min(1.0, load) for card, load in demand.items()}
    return StepFigures(
        moment=moment,
        allocated=float(sum(held.values(), Fraction(0))),
        busy_cards=len(demand),
        idle_allocated=float(sum((h.share for h in holders if not h.busy), Fraction(0))),
        utilisation=sum(capped.values()),
        dev_utilisation=sum(load for card, load in capped.items() if pool_of[card] == dev_pool),
        notebooks=sum(1 for h in holders if h.notebook),
        dev_notebooks=sum(1 for h in holders if h.notebook and h.pool == dev_pool),
        dev_cards_held=sum(1 for card in held if pool_of[card] == dev_pool),
        stranded=float(sum((1 - amount for amount in held.values() if amount < 1), Fraction(0))),
        dev_idle_allocated=float(sum((h.share for h in holders if not h.busy and h.pool == dev_pool), Fraction(0))),
    )


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (``fraction`` 0.95 for p95); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


@dataclass(frozen=True)
class Outcomes:
    """What happened to spawns, kernels and jobs during a run (counted by the driver)."""

    waits: tuple[float, ...]  # seconds from a researcher's first request to a running server
    refused: int  # start attempts refused (quota) or timed out (no slot)
    given_up: int  # researchers who stopped trying for a while after repeated refusals
    busy_culled: int  # servers culled while their kernel was busy
    culled: int
    jobs_finished: int
    jobs_submitted: int


@dataclass(frozen=True)
class Summary:
    peak_researchers: int
    researcher_hours: float  # hours of notebook servers running, summed over researchers
    notebooks_per_gpu: float
    allocated_gpu_hours: float
    idle_gpu_hours: float
    dev_idle_gpu_hours: float
    in_use_hours_per_card_day: float
    utilisation: float
    dev_utilisation: float
    wait_p50: float
    wait_p95: float
    refused: int
    given_up: int
    stranded_share: float
    busy_culled: int
    culled: int
    jobs_finished: int
    jobs_submitted: int


def summarize(
    steps: Sequence[StepFigures], step_seconds: int, cards: int, dev_cards: int, outcomes: Outcomes
) -> Summary:
    """The day's figures. In-use hours are scaled to a 24-hour day when the run is shorter."""
    hours = step_seconds / 3600
    span = max(1, len(steps)) * step_seconds
    peak_dev = max(steps, key=lambda s: (s.dev_notebooks, -s.moment), default=None)
    density = peak_dev.dev_notebooks / peak_dev.dev_cards_held if peak_dev and peak_dev.dev_cards_held else 0.0
    return Summary(
        peak_researchers=max((s.notebooks for s in steps), default=0),
        researcher_hours=sum(s.notebooks for s in steps) * hours,
        notebooks_per_gpu=density,
        allocated_gpu_hours=sum(s.allocated for s in steps) * hours,
        idle_gpu_hours=sum(s.idle_allocated for s in steps) * hours,
        dev_idle_gpu_hours=sum(s.dev_idle_allocated for s in steps) * hours,
        in_use_hours_per_card_day=sum(s.busy_cards for s in steps) * hours / cards * DAY / span,
        utilisation=sum(s.utilisation for s in steps) / (cards * max(1, len(steps))),
        dev_utilisation=sum(s.dev_utilisation for s in steps) / (dev_cards * max(1, len(steps))),
        wait_p50=percentile(outcomes.waits, 0.5),
        wait_p95=percentile(outcomes.waits, 0.95),
        refused=outcomes.refused,
        given_up=outcomes.given_up,
        stranded_share=sum(s.stranded for s in steps) / (cards * max(1, len(steps))),
        busy_culled=outcomes.busy_culled,
        culled=outcomes.culled,
        jobs_finished=outcomes.jobs_finished,
        jobs_submitted=outcomes.jobs_submitted,
    )


def reduction(before: float, after: float) -> float:
    """Percent fewer (positive) or more (negative) ``after`` has than ``before``; 0 when both are 0."""
    return 0.0 if before == 0 else (1 - after / before) * 100


def final_line(baseline: Summary, fracnb: Summary) -> str:
    """The replay's last line of output."""
    return (
        f"replay: notebooks/GPU {baseline.notebooks_per_gpu:.1f} -> {fracnb.notebooks_per_gpu:.1f};"
        f" idle GPU-hours -{reduction(baseline.idle_gpu_hours, fracnb.idle_gpu_hours):.0f}%;"
        f" in-use h/card/day {baseline.in_use_hours_per_card_day:.1f} -> {fracnb.in_use_hours_per_card_day:.1f};"
        f" wait p95 {fracnb.wait_p95:.0f} s; busy culled {fracnb.busy_culled}"
    )
