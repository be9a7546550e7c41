"""The replay's measures, tables and last line, against literal snapshots."""

from __future__ import annotations

from datetime import datetime, timezone
from fractions import Fraction

import pytest

from bench.replay_claims import claim_cards, fits_on, quantity_bytes, requested_share
from bench.replay_measures import (
    DEV_POOL,
    TRAIN_POOL,
    Holder,
    Outcomes,
    Waiting,
    percentile,
    reduction,
    step_figures,
    summarize,
)
from bench.replay_report import run_line, run_lines, table
from bench.replay_settle import (
    asked_share,
    fits_somewhere,
    on_virtual_clock,
    step_moments,
    undecided,
    waits_for_a_slot,
)
from tests.bench.final_line import RUN_LINE

EIGHTH = Fraction(1, 8)
CARDS = {DEV_POOL: ["dev-0/0", "dev-0/1", "dev-0/2"], TRAIN_POOL: ["train-0/0", "train-0/1"]}


def test_a_snapshot_counts_held_and_busy_cards_shares_idle_notebooks_and_capped_compute() -> None:
    holders = [
        Holder("dev-0/0", DEV_POOL, EIGHTH, busy=True, demand=0.8),
        Holder("dev-0/0", DEV_POOL, EIGHTH, busy=True, demand=0.5),
        Holder("dev-0/0", DEV_POOL, EIGHTH, busy=False),
        Holder("dev-0/1", DEV_POOL, EIGHTH, busy=False),
        Holder("train-0/0", TRAIN_POOL, Fraction(1), busy=True, demand=0.65, notebook=False),
        Holder("train-0/1", TRAIN_POOL, Fraction(1), busy=False),
    ]
    figures = step_figures(120, holders, CARDS)
    dev, train = figures.pools[DEV_POOL], figures.pools[TRAIN_POOL]
    assert (dev.cards, dev.held, dev.busy, dev.notebooks) == (3, 2, 1, 4)
    assert (dev.shares, dev.idle_notebook_shares, dev.job_shares) == (0.5, 0.25, 0.0)
    assert dev.utilisation == 1.0  # 0.8 + 0.5 on one card, capped
    assert (train.held, train.busy, train.job_shares, train.idle_notebook_shares) == (2, 1, 1.0, 1.0)
    assert train.utilisation == pytest.approx(0.65)
    assert figures.total("held") == 4
    assert figures.waiting == 0


def test_stranded_capacity_is_free_pieces_too_small_for_a_waiting_start_that_together_would_fit_it() -> None:
    half = Fraction(1, 2)
    holders = [
        Holder("dev-0/0", DEV_POOL, Fraction(3, 4), busy=False),
        Holder("dev-0/1", DEV_POOL, Fraction(3, 4), busy=False),
        Holder("dev-0/2", DEV_POOL, Fraction(7, 8), busy=False),
    ]
    # Free: 1/4, 1/4, 1/8 = 5/8; a 1/2 start waits: the pieces would have fitted it.
    assert step_figures(0, holders, CARDS, [Waiting(DEV_POOL, half)]).pools[DEV_POOL].stranded == 5 / 8
    # A 1/8 start fits a piece as it is (it waits for another reason): nothing stranded.
    assert step_figures(0, holders, CARDS, [Waiting(DEV_POOL, EIGHTH)]).pools[DEV_POOL].stranded == 0
    # Nobody waits, or the pieces together are too small, or the waiter wants the other pool: nothing.
    assert step_figures(0, holders, CARDS).pools[DEV_POOL].stranded == 0
    assert step_figures(0, holders, CARDS, [Waiting(DEV_POOL, Fraction(1))]).pools[DEV_POOL].stranded == 0
    assert step_figures(0, holders, CARDS, [Waiting(TRAIN_POOL, half)]).pools[DEV_POOL].stranded == 0


def day(shares_at_peak: list[Fraction]) -> list:
    """Two steps of an hour: a quiet one and a peak of idle notebooks with these shares, packed first fit."""
    quiet = step_figures(0, [Holder("dev-0/0", DEV_POOL, EIGHTH, busy=True, demand=0.5)], CARDS, [], 3600)
    peak_holders, filled = [], [Fraction(0)] * 3
    for share in shares_at_peak:
        card = next(i for i, used in enumerate(filled) if used + share <= 1)
        filled[card] += share
        peak_holders.append(Holder(f"dev-0/{card}", DEV_POOL, share, busy=False))
    peak_holders.append(Holder("train-0/0", TRAIN_POOL, Fraction(1), busy=True, demand=0.65, notebook=False))
    peak = step_figures(3600, peak_holders, CARDS, [Waiting(DEV_POOL, EIGHTH)], 3600)
    return [quiet, peak]


def test_the_day_summary_finds_the_peak_and_scales_per_card_hours_to_a_day() -> None:
    outcomes = Outcomes(waits=(0.0, 30.0, 600.0), served=9, slowdowns=(1.0, 1.2, 2.5), jobs_finished=3)
    summary = summarize(day([EIGHTH] * 9), outcomes)
    assert summary.researcher_hours == 10  # 1 + 9 notebooks for an hour each
    assert (summary.peak_dev_cards_held, summary.peak_dev_shares) == (2, 9 / 8)
    assert summary.packing == 1.0  # ⌈9/8⌉ = 2 cards for 2 held
    assert (summary.dev_cards_freed, summary.dev_cards) == (1, 3)
    assert summary.peak_notebook_cards == 2  # the training card holds a job
    assert summary.queue_peak == 1
    dev = summary.pools[DEV_POOL]
    # 1 then 2 cards held, over 3 cards and 2 simulated hours, scaled to 24 hours.
    assert dev.occupancy == pytest.approx(3 / 3 * 24 / 2)
    assert dev.busy == pytest.approx(1 / 3 * 24 / 2)
    assert dev.idle_notebook_hours == pytest.approx(9 / 8)
    assert summary.cluster.job_hours == 1
    assert summary.cluster.occupancy == pytest.approx((1 + 3) / 5 * 24 / 2)
    assert summary.idle_per_researcher_hour == pytest.approx(9 / 8 / 10)
    assert (summary.wait_p50, summary.wait_p95, summary.slowdown_p95) == (30.0, 600.0, 2.5)
    assert summary.jobs_a_week == 21


def test_steps_of_different_lengths_count_for_their_own_time() -> None:
    holder = [Holder("dev-0/0", DEV_POOL, EIGHTH, busy=False)]
    steps = [step_figures(0, holder, CARDS, seconds=60), step_figures(60, [], CARDS, seconds=300)]
    summary = summarize(steps, Outcomes())
    assert summary.researcher_hours == pytest.approx(60 / 3600)
    assert summary.pools[DEV_POOL].occupancy == pytest.approx(60 / 3600 / 3 * 86400 / 360)


def test_packing_efficiency_counts_cards_held_beyond_the_shares() -> None:
    # 9 eighths over cards 0 and 1, plus a lone eighth on card 2: 3 cards for ⌈10/8⌉ = 2.
    steps = day([EIGHTH] * 9)
    steps[1] = step_figures(
        3600,
        [
            *(Holder(f"dev-0/{i // 8}", DEV_POOL, EIGHTH, False) for i in range(9)),
            Holder("dev-0/2", DEV_POOL, EIGHTH, False),
        ],
        CARDS,
        seconds=3600,
    )
    summary = summarize(steps, Outcomes())
    assert summary.peak_dev_cards_held == 3
    assert summary.packing == pytest.approx(2 / 3)
    assert summary.dev_cards_freed == 0


def test_percentiles_are_nearest_rank_and_reduction_is_a_percentage() -> None:
    assert percentile([], 0.95) == 0.0
    assert percentile([5.0], 0.5) == 5.0
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 0.5), percentile(values, 0.95)) == (50.0, 95.0)
    assert reduction(100, 30) == pytest.approx(70)
    assert reduction(0, 0) == 0.0


def test_each_run_of_each_day_gets_its_own_line_with_its_own_figures() -> None:
    baseline = summarize(day([Fraction(1)] * 3), Outcomes(served=3, state_lost=4, waits=(900.0,), jobs_finished=2))
    sliced = summarize(day([EIGHTH] * 9), Outcomes(served=9, state_lost=1, busy_culled=0, slowdowns=(1.5,)))
    lend = summarize(
        day([Fraction(1, 2)] * 2),
        Outcomes(served=2, redone_hours=0.3, reclaim_waits=(4.0, 12.0), waits=(1.0, 4.0, 12.0)),
    )
    normal = {"baseline": baseline, "fracnb": sliced, "fracnb-dra-lend-saturating": lend}
    busy = {"baseline": baseline}
    lines = run_lines({"normal": normal, "busy": busy})
    assert [RUN_LINE.match(line)["day"] + "/" + RUN_LINE.match(line)["run"] for line in lines] == [
        "normal/baseline",
        "normal/fracnb",
        "normal/fracnb-dra-lend-saturating",
        "busy/baseline",
    ]
    base = RUN_LINE.match(lines[0])
    assert (base["served"], base["wait"], base["reclaim"], base["lost"], base["jobs"]) == ("3", "900", "-", "4", "14")
    sliced_line = RUN_LINE.match(lines[1])
    assert (sliced_line["served"], sliced_line["slowdown"], sliced_line["lost"]) == ("9", "1.50", "1")
    lent = RUN_LINE.match(run_line("normal", "fracnb-dra-lend-saturating", lend))
    assert (lent["reclaim"], lent["redone"], lent["wait"]) == ("12", "0.3", "12")
    rendered = table(
        normal, {"baseline": "baseline (z2jh)", "fracnb": "fracnb (TS)", "fracnb-dra-lend-saturating": "lend"}
    )
    assert rendered.splitlines()[0].startswith("| measure | baseline (z2jh) | fracnb (TS) | lend |")
    assert "| packing efficiency ⌈shares⌉ / cards held, at the peak | 1.00 | 1.00 | 1.00 |" in rendered
    assert "| training jobs finished (x 7: a week) | 2 (14) | 0 (0) | 0 (0) | 160 → 368 a week |" in rendered
    assert "| reclaim p95 (s): queued start to running, lent cards reclaimed | - | - | 12 |" in rendered


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
    # A notebook may take the slot of a lower-priority pod: the scheduler preempts it, so it is undecided.
    batch = _pod("job", "dev-0", "Running", priority=-100)
    assert fits_somewhere(waiting, nodes, [*one_held, batch])
    assert not fits_somewhere(_pod("job2", priority=-100), nodes, [*one_held, batch])


def test_the_night_goes_in_longer_steps() -> None:
    moments = step_moments(24 * 3600, 60)
    assert moments[:2] == [0, 60]
    assert moments[moments.index(14 * 3600) + 1] == 14 * 3600 + 300
    assert moments[-1] == 24 * 3600 - 300
    assert len(moments) == 14 * 60 + 10 * 12
    assert step_moments(24 * 3600, 300) == list(range(0, 24 * 3600, 300))


def test_a_notebook_pod_says_which_share_it_waits_for() -> None:
    assert asked_share({"metadata": {"annotations": {"fracnb.io/gpu-fraction": "1/8"}}}) == EIGHTH
    assert asked_share({"metadata": {}}) == 1


def _claim(pod: str, memory: str | None, device: str | None = None) -> dict:
    exactly = {"deviceClassName": "gpu.nvidia.com"}
    if memory:
        exactly["capacity"] = {"requests": {"memory": memory}}
    claim = {
        "metadata": {"ownerReferences": [{"kind": "Pod", "name": pod}]},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }
    if device:
        result = {"pool": "dev-0", "device": device, "consumedCapacity": {"memory": memory or "32Gi"}}
        claim["status"] = {"allocation": {"devices": {"results": [result]}}}
    return claim


def test_dra_cards_and_shares_come_from_the_claims_status() -> None:
    gib32 = 32 * 2**30
    claims = [
        _claim("nb", "4Gi", "gpu-0"),
        _claim("half", "16Gi", "gpu-0"),
        _claim("job", None, "gpu-1"),
        _claim("new", "16Gi"),
    ]
    cards = claim_cards(claims, gib32)
    assert {pod: (c.card, c.share) for pod, c in cards.items()} == {
        "nb": ("dev-0/gpu-0", EIGHTH),
        "half": ("dev-0/gpu-0", Fraction(1, 2)),
        "job": ("dev-0/gpu-1", Fraction(1)),
    }
    assert requested_share(claims[3], gib32) == Fraction(1, 2)
    held = {"dev-0/gpu-0": Fraction(5, 8), "dev-0/gpu-1": Fraction(1)}
    assert not fits_on(Fraction(1, 2), held, ["dev-0/gpu-0", "dev-0/gpu-1"])
    assert fits_on(Fraction(3, 8), held, ["dev-0/gpu-0", "dev-0/gpu-1"])
    assert quantity_bytes("4096Mi") == 4 * 2**30
    with pytest.raises(ValueError, match="not a byte quantity"):
        quantity_bytes("4 GB")


def _node(name: str, pool: str, shared: int) -> dict:
    return {
        "metadata": {"name": name, "labels": {"node-pool": pool}},
        "status": {"allocatable": {"nvidia.com/gpu.shared": str(shared)}},
    }


def _pod(
    name: str, node: str | None = None, phase: str = "Pending", gates: list | None = None, priority: int = 0
) -> dict:
    spec = {
        "nodeSelector": {"node-pool": "development"},
        "containers": [{"name": "nb", "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}],
        "priority": priority,
    }
    if node:
        spec["nodeName"] = node
    if gates:
        spec["schedulingGates"] = gates
    return {"metadata": {"name": name}, "spec": spec, "status": {"phase": phase}}


def test_the_culler_sees_queue_times_on_the_virtual_clock() -> None:
    origin = datetime(2026, 3, 2, 7, 0, tzinfo=timezone.utc)
    queued = {
        "metadata": {"name": "jupyter-a", "annotations": {"fracnb.io/queued-at": "2026-11-25T17:00:00Z", "x": "y"}}
    }
    running = {"metadata": {"name": "jupyter-b", "annotations": {}}}
    moved = on_virtual_clock([queued, running], {"jupyter-a": origin, "jupyter-b": origin})
    assert moved[0]["metadata"]["annotations"] == {"fracnb.io/queued-at": "2026-03-02T07:00:00Z", "x": "y"}
    assert moved[1] == running
    assert queued["metadata"]["annotations"]["fracnb.io/queued-at"] == "2026-11-25T17:00:00Z"  # not changed in place


def test_jobs_on_lent_development_cards_count_as_held_but_not_in_the_notebooks_peak_or_packing() -> None:
    notebooks = [Holder("dev-0/0", DEV_POOL, EIGHTH, busy=False) for _ in range(3)]
    lent = [Holder(f"dev-0/{i}", DEV_POOL, Fraction(1), busy=True, demand=0.65, notebook=False) for i in (1, 2)]
    steps = [step_figures(0, [*notebooks, *lent], CARDS, [], 3600)]
    summary = summarize(steps, Outcomes())
    assert (summary.peak_dev_cards_held, summary.peak_dev_shares, summary.packing) == (1, 3 / 8, 1.0)
    assert summary.dev_cards_freed == 2  # freed from notebooks, then lent
    assert summary.pools[DEV_POOL].occupancy == pytest.approx(24)  # all three cards held for the hour
    assert summary.cluster.job_hours == 2
