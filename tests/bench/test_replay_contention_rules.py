"""Contention rules per backend, and the fluid bound: the best any placement could do on the cards held."""

from __future__ import annotations

from fractions import Fraction

import pytest

from bench.replay_contention import (
    SUMMED_DEMAND,
    TIME_SLICING,
    FluidBound,
    card_stretch,
    fluid_stretch,
    planned_bound,
)
from bench.replay_model import Parameters, busy_parameters, generate_day


def test_time_slicing_slows_each_busy_cell_by_the_number_of_busy_holders_however_little_each_uses() -> None:
    assert card_stretch(TIME_SLICING, []) == 1.0
    assert card_stretch(TIME_SLICING, [0.5]) == 1.0
    assert card_stretch(TIME_SLICING, [0.5, 0.5]) == 2.0  # two bursts: each gets every other slice
    assert card_stretch(TIME_SLICING, [0.8, 0.5, 0.5]) == 3.0


def test_summed_demand_slows_busy_cells_only_past_the_whole_card_and_by_the_sum() -> None:
    assert card_stretch(SUMMED_DEMAND, [0.5, 0.5]) == 1.0  # MPS: two half-card kernels side by side
    assert card_stretch(SUMMED_DEMAND, [0.8, 0.5]) == pytest.approx(1.3)
    assert card_stretch(SUMMED_DEMAND, [0.8, 0.5, 0.5]) == pytest.approx(1.8)


def test_an_unknown_rule_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown contention rule 'mig'"):
        card_stretch("mig", [0.5])
    with pytest.raises(ValueError, match="unknown contention rule"):
        fluid_stretch("mig", [0.5], 2)


def test_the_fluid_stretch_spreads_the_load_over_every_card_held() -> None:
    assert fluid_stretch(TIME_SLICING, [0.5] * 6, 4) == 1.5
    assert fluid_stretch(TIME_SLICING, [0.5] * 3, 4) == 1.0
    assert fluid_stretch(SUMMED_DEMAND, [0.5] * 6, 2) == 1.5
    assert fluid_stretch(SUMMED_DEMAND, [0.8] * 4, 4) == 1.0
    assert fluid_stretch(SUMMED_DEMAND, [0.8], 0) == 1.0  # nothing busy is held: nothing to slow


def test_the_bound_follows_each_busy_segment_through_the_steps_it_runs() -> None:
    bound = FluidBound(TIME_SLICING)
    bound.observe({("ann", 1): 0.5, ("bob", 3): 0.5, ("cy", 2): 0.8}, cards=2, seconds=60)  # 1.5x
    bound.observe({("ann", 1): 0.5}, cards=2, seconds=60)  # alone: 1x
    assert sorted(bound.slowdowns()) == pytest.approx([120 / (40 + 60), 1.5, 1.5])


def test_the_notes_bound_holds_for_summed_demand_and_is_higher_under_time_slicing() -> None:
    """contention-and-busy-day.md §1: the 1/8 notebooks of the normal day (seed 1) on 6, 8, 10, 12 cards give
    2.0, 1.5, 1.2, 1.04 under summed demand. Time-slicing charges a card per busy cell: 3.0, 2.25, 1.8, 1.5."""
    params = Parameters()
    day, eighths = generate_day(params, 1), (Fraction(1, 8),)
    summed = [planned_bound(day, params, cards, SUMMED_DEMAND, eighths) for cards in (6, 8, 10, 12)]
    sliced = [planned_bound(day, params, cards, TIME_SLICING, eighths) for cards in (6, 8, 10, 12)]
    assert summed == pytest.approx([2.0, 1.5, 1.2, 1.04], abs=0.02)
    assert sliced == pytest.approx([3.0, 2.25, 1.8, 1.5], abs=0.02)
    everyone = (Fraction(1, 8), Fraction(1, 2), Fraction(1))
    busy = busy_parameters()
    busy_day = generate_day(busy, 1)
    # The busy day's notebooks on the 16 development cards, time-sliced: no placement gets p95 under 1.9x.
    assert planned_bound(busy_day, busy, 16, TIME_SLICING, everyone) == pytest.approx(1.94, abs=0.02)
    assert planned_bound(busy_day, busy, 20, TIME_SLICING, everyone) == pytest.approx(1.55, abs=0.02)
