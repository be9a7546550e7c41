"""The replay's measures and card model, against literal snapshots."""

from __future__ import annotations

from fractions import Fraction

import pytest

from bench.replay_cards import CardModel
from bench.replay_day import fits_somewhere, undecided, waits_for_a_slot
from bench.replay_measures import (
    Holder,
    Outcomes,
    StepFigures,
    final_line,
    percentile,
    reduction,
    step_figures,
    summarize,
)
from bench.replay_report import table

EIGHTH = Fraction(1, 8)


def test_a_snapshot_counts_shares_busy_cards_capped_compute_and_stranded_capacity() -> None:
    holders = [
        Holder("dev-0/0", "development", EIGHTH, busy=True, demand=0.8),
        Holder("dev-0/0", "development", EIGHTH, busy=True, demand=0.5),
        Holder("dev-0/0", "development", EIGHTH, busy=False),
        Holder("dev-0/1", "development", EIGHTH, busy=False),
        Holder("train-0/0", "training", Fraction(1), busy=True, demand=0.9, notebook=False),
        Holder("train-0/1", "training", Fraction(1), busy=False),
    ]
    figures = step_figures(120, holders)
    assert figures == StepFigures(
        moment=120,
        allocated=2.5,
        busy_cards=2,
        idle_allocated=0.25 + 1,
        utilisation=pytest.approx(1.0 + 0.9),
        dev_utilisation=1.0,
        notebooks=5,
        dev_notebooks=4,
        dev_cards_held=2,
        stranded=5 / 8 + 7 / 8,
        dev_idle_allocated=0.25,
    )


def test_the_day_summary_scales_in_use_hours_to_a_day_and_finds_the_densest_moment() -> None:
    steps = [
        StepFigures(0, 2.0, 1, 1.0, 0.5, 0.5, 8, 8, 1, 0.0, dev_idle_allocated=0.25),
        StepFigures(3600, 1.0, 2, 0.0, 1.5, 0.0, 1, 0, 0, 0.5),
    ]
    outcomes = Outcomes(
        (0.0, 30.0, 600.0), refused=2, given_up=1, busy_culled=0, culled=3, jobs_finished=4, jobs_submitted=5
    )
    summary = summarize(steps, 3600, cards=4, dev_cards=2, outcomes=outcomes)
    assert summary.peak_researchers == 8
    assert summary.researcher_hours == 9.0
    assert summary.notebooks_per_gpu == 8.0
    assert summary.allocated_gpu_hours == 3.0
    assert summary.idle_gpu_hours == 1.0
    assert summary.dev_idle_gpu_hours == 0.25
    assert summary.in_use_hours_per_card_day == pytest.approx(3 / 4 * 24 / 2)  # 2 simulated hours
    assert summary.utilisation == pytest.approx(2.0 / 8)
    assert summary.dev_utilisation == pytest.approx(0.5 / 4)
    assert summary.stranded_share == pytest.approx(0.5 / 8)
    assert (summary.wait_p50, summary.wait_p95) == (30.0, 600.0)
    assert (summary.refused, summary.given_up, summary.culled, summary.jobs_finished) == (2, 1, 3, 4)


def test_percentiles_are_nearest_rank() -> None:
    assert percentile([], 0.95) == 0.0
    assert percentile([5.0], 0.5) == 5.0
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 0.5), percentile(values, 0.95)) == (50.0, 95.0)


def test_reduction_and_the_final_line() -> None:
    assert reduction(100, 30) == pytest.approx(70)
    assert reduction(0, 0) == 0.0
    outcomes = Outcomes((), 0, 0, 0, 0, 0, 0)
    before = summarize([StepFigures(0, 16, 2, 10, 1, 1, 16, 16, 16, 0)], 3600, 32, 16, outcomes)
    after = summarize([StepFigures(0, 4, 3, 3, 2, 1, 32, 32, 4, 0)], 3600, 32, 16, outcomes)
    assert final_line(before, after) == (
        "replay: notebooks/GPU 1.0 -> 8.0; idle GPU-hours -70%; in-use h/card/day 1.5 -> 2.2;"
        " wait p95 0 s; busy culled 0"
    )
    rendered = table(before, after)
    assert "| notebooks per GPU at peak (development GPUs) | 1.0 | 8.0 | 8.00x | 1 → 8 | ≥ 8 |" in rendered
    assert "| GPU time in use per card per day (h) | 1.5 | 2.2 | 1.50x | 14.4 → 22.8 | ≥ 22.8 |" in rendered


def test_the_device_plugin_model_spreads_replicas_and_gives_whole_gpus_the_lowest_free_card() -> None:
    model = CardModel({"dev-0": (2, 8), "train-0": (2, 1)})
    assert [model.place(f"nb{i}", "dev-0").card for i in range(3)] == ["dev-0/0", "dev-0/1", "dev-0/0"]
    assert model.place("nb0", "dev-0").card == "dev-0/0"  # the same pod keeps its card
    assert model.place("job", "train-0").share == 1
    assert model.place("job2", "train-0").card == "train-0/1"
    with pytest.raises(ValueError, match="no free replica"):
        model.place("job3", "train-0")
    model.release("nb1")
    assert model.place("nb3", "dev-0").card == "dev-0/1"
    assert model.all_cards() == ["dev-0/0", "dev-0/1", "train-0/0", "train-0/1"]


def test_a_packing_device_plugin_fills_one_card_before_the_next() -> None:
    model = CardModel({"dev-0": (2, 2)}, packed=True)
    assert [model.place(f"nb{i}", "dev-0").card for i in range(4)] == ["dev-0/0", "dev-0/0", "dev-0/1", "dev-0/1"]


def _node(name: str, pool: str, shared: int) -> dict:
    return {
        "metadata": {"name": name, "labels": {"node-pool": pool}},
        "status": {"allocatable": {"nvidia.com/gpu.shared": str(shared)}},
    }


def _pod(name: str, node: str | None = None, phase: str = "Pending", gates: list | None = None) -> dict:
    spec = {
        "nodeSelector": {"node-pool": "development"},
        "containers": [{"name": "nb", "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}],
    }
    if node:
        spec["nodeName"] = node
    if gates:
        spec["schedulingGates"] = gates
    return {"metadata": {"name": name}, "spec": spec, "status": {"phase": phase}}


def test_the_clock_waits_for_pods_the_scheduler_can_still_place_and_not_for_queued_ones() -> None:
    nodes = [_node("dev-0", "development", 2), _node("train-0", "training", 8)]
    one_held = [_pod("a", "dev-0", "Running")]
    full = [*one_held, _pod("b", "dev-0", "Running")]
    waiting = _pod("c")
    assert fits_somewhere(waiting, nodes, one_held)
    assert undecided(waiting, nodes, one_held)  # there is room: the scheduler will bind it
    assert not waits_for_a_slot(waiting, nodes, one_held)
    assert not fits_somewhere(waiting, nodes, full)
    assert waits_for_a_slot(waiting, nodes, full)  # no room anywhere: it waits, the clock may go on
    gated = _pod("d", gates=[{"name": "fracnb.io/queue"}])
    assert waits_for_a_slot(gated, nodes, one_held)  # the hub's queue holds it
    assert undecided(_pod("e", "dev-0", "Pending"), nodes, full)  # bound, not yet running
    assert not undecided(full[0], nodes, full)
    assert undecided(None, nodes, full)
