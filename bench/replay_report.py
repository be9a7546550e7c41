"""The replay's tables (pure: summaries in, Markdown out), its line per day and run, and its plot of cards held
and busy."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.replay_measures import DEV_POOL, TRAIN_POOL, StepFigures, Summary
from bench.replay_model import DAY_START_HOUR

Cell = Callable[[Summary], str]
TIME_SLICING, DRA = "fracnb", "fracnb-dra"


@dataclass(frozen=True)
class Row:
    measure: str
    value: Cell
    source: str  # "real", "modelled", or which part is which
    reference: str = "—"  # the reference case's before → after; "n/v" where its definition is unknown
    goal: str = ""


def _n(name: str, fmt: str = "{:.0f}") -> Cell:
    return lambda s: fmt.format(getattr(s.outcomes, name))


def _pool(pool: str, name: str, fmt: str = "{:.1f}") -> Cell:
    return lambda s: fmt.format(getattr(s.pools[pool], name)) if pool in s.pools else "—"


def _cluster(name: str, fmt: str = "{:.1f}") -> Cell:
    return lambda s: fmt.format(getattr(s.cluster, name))


def _reclaim(summary: Summary) -> str:
    return f"{summary.reclaim_p95:.0f}" if summary.outcomes.reclaim_waits else "-"


PLACEMENT = "TS modelled, DRA real"  # the card: the device plugin's choice (modelled) or the claim's status
ACTIVITY = "real holding, modelled activity"
CULLER = "real culler, modelled activity"
DEV_ROWS = (
    Row("researchers served", _n("served"), "real"),
    Row("researcher-hours with a running server", lambda s: f"{s.researcher_hours:.0f}", "real"),
    Row(
        "cards holding notebooks at the peak (shares they hold)",
        lambda s: f"{s.peak_dev_cards_held} ({s.peak_dev_shares:.2f})",
        PLACEMENT,
        "n/v",
    ),
    Row(
        "packing efficiency ⌈shares⌉ / cards held, at the peak",
        lambda s: f"{s.packing:.2f}",
        PLACEMENT,
        "n/v",
        "≥ 0.95",
    ),
    Row(
        "development cards freed at the peak",
        lambda s: f"{s.dev_cards_freed}/{s.dev_cards}",
        PLACEMENT,
        "—",
        "≥ 10/16 (normal day)",
    ),
    Row(
        "cards holding notebooks at the peak, both pools",
        lambda s: f"{s.peak_notebook_cards}",
        PLACEMENT,
        "n/v",
    ),
    Row(
        "occupancy: hours held per card per day (with lent jobs, where lending)",
        _pool(DEV_POOL, "occupancy"),
        PLACEMENT,
        "n/v",
    ),
    Row(
        "busy: hours with a busy holder per card per day",
        _pool(DEV_POOL, "busy"),
        "TS modelled, DRA real; modelled activity",
        "n/v",
    ),
    Row("modelled utilisation per card", _pool(DEV_POOL, "utilisation", "{:.1%}"), "modelled", "10 % → 80 % (n/v)"),
    Row("GPU-hours allocated but idle (all notebooks)", _cluster("idle_notebook_hours", "{:.0f}"), ACTIVITY),
    Row(
        "... per served researcher-hour",
        lambda s: f"{s.idle_per_researcher_hour:.3f}",
        ACTIVITY,
        "—",
        "-60 % vs baseline",
    ),
    Row("stranded GPU-hours (fragments a waiting start could have used)", _pool(DEV_POOL, "stranded_hours"), PLACEMENT),
    Row("slowdown p95 of busy cells (contention)", lambda s: f"{s.slowdown_p95:.2f}x", "modelled", "—", "reported"),
    Row("... contention rule", lambda s: s.outcomes.contention or "—", "modelled"),
    Row(
        "... fluid bound: the best p95 any placement could reach on the cards held",
        lambda s: f"{s.slowdown_bound:.2f}x",
        "modelled",
    ),
    Row("training cards borrowed by notebooks, at most", _n("borrowed_peak"), "real"),
    Row("spawn wait p50 (s)", lambda s: f"{s.wait_p50:.0f}", "real (1-minute steps)"),
    Row("spawn wait p95 (s)", lambda s: f"{s.wait_p95:.0f}", "real (1-minute steps)", "—", "< 600 (busy day)"),
    Row("starts waiting at the peak (queue length)", lambda s: f"{s.queue_peak}", "real"),
    Row("start attempts refused or timed out", _n("refused"), "real", "—", "fewer than baseline"),
    Row("times a researcher gave up (for an hour)", _n("given_up"), "real", "—", "fewer than baseline"),
    Row(
        "servers culled (of which by the timeout under demand)",
        lambda s: f"{s.outcomes.culled} ({s.outcomes.demand_culled})",
        CULLER,
    ),
    Row("busy kernels culled", _n("busy_culled"), CULLER, "—", "0"),
    Row(
        "kernel state lost (culled servers)",
        _n("state_lost"),
        CULLER,
        "—",
        "0 with hibernation",
    ),
    Row("kernels hibernated (state saved)", _n("hibernated"), "modelled (hibernation)"),
)
CLUSTER_ROWS = (
    Row(
        "occupancy: hours held per card per day",
        _cluster("occupancy"),
        PLACEMENT,
        "14.4 → 22.8 (n/v)",
        "22.8 (backlog)",
    ),
    Row("busy: hours with a busy holder per card per day", _cluster("busy"), "modelled activity", "n/v"),
    Row("modelled utilisation per card", _cluster("utilisation", "{:.1%}"), "modelled", "30 % → 80 % (n/v)"),
    Row("training pool occupancy per card per day", _pool(TRAIN_POOL, "occupancy"), "real", "n/v"),
    Row("training GPU-hours delivered", _cluster("job_hours", "{:.0f}"), "real"),
    Row(
        "training jobs finished (x 7: a week)",
        lambda s: f"{s.outcomes.jobs_finished} ({s.jobs_a_week:.0f})",
        "real",
        "160 → 368 a week",
    ),
    Row("training jobs preempted for notebooks", _n("jobs_preempted"), "real"),
    Row("training jobs reclaimed from lent cards", _n("jobs_reclaimed"), "real (fracnb's reclaim rule)"),
    Row(
        "training GPU-hours redone (work since the last checkpoint)",
        lambda s: f"{s.outcomes.redone_hours:.1f} ({s.redone_share:.1%})",
        "modelled (30-min checkpoints)",
        "—",
        "≤ 5 % of delivered (lend, saturating)",
    ),
    Row(
        "reclaim p95 (s): queued start to running, lent cards reclaimed",
        _reclaim,
        "real",
        "—",
        "≤ 30 (lend, saturating)",
    ),
)


def table(summaries: Mapping[str, Summary], labels: Mapping[str, str]) -> str:
    """One day's runs side by side: the development pool (fracnb's claims), then the whole cluster."""
    names = list(summaries)
    header = ["measure", *(labels[n] for n in names), "reference (before → after)", "goal", "source"]
    lines = [f"| {' | '.join(header)} |", "|---|" + "---:|" * len(names) + "---|---|---|"]
    for title, rows in (
        ("**notebooks** (development pool unless the row says)", DEV_ROWS),
        ("**whole cluster** (with the batch queue)", CLUSTER_ROWS),
    ):
        lines.append(f"| {title} |" + " |" * (len(names) + 3))
        for row in rows:
            cells = [row.measure, *(row.value(summaries[n]) for n in names), row.reference, row.goal, row.source]
            lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


def run_line(day: str, run: str, summary: Summary) -> str:
    """One line for one run of one day, every figure that run's own ("-": no start waited for a reclaim)."""
    return (
        f"replay[{day}/{run}]: cluster h/card/day {summary.cluster.occupancy:.1f}; "
        f"training jobs/week {summary.jobs_a_week:.0f}; training GPU-h redone {summary.outcomes.redone_hours:.1f}; "
        f"served {summary.outcomes.served}; wait p95 {summary.wait_p95:.0f} s; reclaim p95 {_reclaim(summary)} s; "
        f"idle per researcher-hour {summary.idle_per_researcher_hour:.3f}; slowdown p95 {summary.slowdown_p95:.2f}x; "
        f"busy culled {summary.outcomes.busy_culled}; state lost {summary.outcomes.state_lost}; "
        f"slowdown bound {summary.slowdown_bound:.2f}x; borrowed cards peak {summary.outcomes.borrowed_peak}"
    )


def run_lines(days: Mapping[str, Mapping[str, Summary]]) -> list[str]:
    """The replay's closing lines: one per day and run, in the order they ran."""
    return [run_line(day, run, summary) for day, runs in days.items() for run, summary in runs.items()]


COLOURS = {
    "baseline": "tab:grey",
    TIME_SLICING: "tab:blue",
    DRA: "tab:green",
    "fracnb-dra-lend": "tab:orange",
    "baseline-saturating": "black",
    "fracnb-dra-lend-saturating": "tab:red",
    "fracnb-dra-adaptive": "tab:purple",
    "fracnb-dra-adaptive-lend-saturating": "tab:brown",
    "fracnb-dra-adaptive-borrow": "tab:cyan",
}


def plot(days: Mapping[str, Mapping[str, Sequence[StepFigures]]], labels: Mapping[str, str], path: Path) -> None:
    """Cards held and cards busy over each day, whole cluster, every run; one panel per day (:func:`draw`)."""
    import matplotlib.pyplot as plt

    figure = draw(days, labels)
    # The saved image grows to hold every label and the legend below the panels.
    figure.savefig(path, bbox_inches="tight")
    plt.close(figure)


def draw(days: Mapping[str, Mapping[str, Sequence[StepFigures]]], labels: Mapping[str, str]) -> Any:
    """The plot's matplotlib Figure: a panel per day, the legend of every run below the panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(days), figsize=(7 * len(days), 4.5), dpi=110, squeeze=False, sharey=True)
    for axis, (day, runs) in zip(axes[0], days.items(), strict=True):
        for name, steps in runs.items():
            hours = [DAY_START_HOUR + s.moment / 3600 for s in steps]
            colour = COLOURS.get(name)
            axis.plot(hours, [s.total("held") for s in steps], color=colour, label=f"{labels[name]}: cards held")
            axis.plot(
                hours,
                [s.total("busy") for s in steps],
                color=colour,
                linestyle="--",
                label=f"{labels[name]}: cards busy",
            )
        axis.set_ylim(bottom=0)
        axis.set_title(f"{day} day")
        axis.set_xlabel("time of day (h; past 24 is the next morning)")
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("cards (whole cluster)")
    legend: dict[str, Any] = {}  # every day's runs, each once (days may replay different runs)
    for axis in axes[0]:
        for handle, name in zip(*axis.get_legend_handles_labels(), strict=True):
            legend.setdefault(name, handle)
    figure.suptitle("Cards held and busy over the day: notebooks and the training backlog")
    figure.tight_layout()
    # Below the panels and their x-axis labels, never over them.
    figure.legend(legend.values(), legend.keys(), loc="upper center", bbox_to_anchor=(0.5, 0), ncol=3, fontsize="small")
    return figure
