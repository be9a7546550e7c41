"""The replay's table (pure: summaries in, Markdown out) and its plot of GPUs allocated and in use over the day."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.replay_measures import StepFigures, Summary
from bench.replay_model import DAY_START_HOUR


@dataclass(frozen=True)
class Row:
    measure: str
    value: Callable[[Summary], float]
    fmt: str
    reference: str = ""
    goal: str = ""
    ratio: bool = True


ROWS = (
    Row("researchers served concurrently at peak", lambda s: s.peak_researchers, "{:.0f}"),
    Row("researcher-hours with a running server", lambda s: s.researcher_hours, "{:.0f}"),
    Row("notebooks per GPU at peak (development GPUs)", lambda s: s.notebooks_per_gpu, "{:.1f}", "1 → 8", "≥ 8"),
    Row("GPU-hours allocated", lambda s: s.allocated_gpu_hours, "{:.0f}"),
    Row("GPU-hours allocated but idle", lambda s: s.idle_gpu_hours, "{:.0f}", "", "≥ 60 % fewer"),
    Row("... of which on development GPUs", lambda s: s.dev_idle_gpu_hours, "{:.0f}"),
    Row(
        "GPU time in use per card per day (h)", lambda s: s.in_use_hours_per_card_day, "{:.1f}", "14.4 → 22.8", "≥ 22.8"
    ),
    Row("modelled utilisation per card", lambda s: 100 * s.utilisation, "{:.0f} %", "30 % → 80 %"),
    Row("development GPUs' modelled utilisation", lambda s: 100 * s.dev_utilisation, "{:.0f} %", "10 % → 80 %"),
    Row("spawn wait p50 (s)", lambda s: s.wait_p50, "{:.0f}"),
    Row("spawn wait p95 (s)", lambda s: s.wait_p95, "{:.0f}", "", "< 600"),
    Row("start attempts refused or timed out", lambda s: s.refused, "{:.0f}"),
    Row("times a researcher gave up (for an hour)", lambda s: s.given_up, "{:.0f}"),
    Row("stranded share of all GPUs", lambda s: 100 * s.stranded_share, "{:.1f} %", "", "≤ 5 %", ratio=False),
    Row("busy kernels culled", lambda s: s.busy_culled, "{:.0f}", "", "0", ratio=False),
    Row("servers culled", lambda s: s.culled, "{:.0f}"),
    Row("training jobs finished in the day", lambda s: s.jobs_finished, "{:.0f}", "160 → 368 a week"),
)


def _ratio(before: float, after: float) -> str:
    if before == 0:
        return "—" if after == 0 else "∞"
    return f"{after / before:.2f}x"


def table(baseline: Summary, fracnb: Summary, rows: Sequence[Row] = ROWS) -> str:
    """Both runs side by side, fracnb/baseline ratios and the reference case's figures."""
    lines = [
        "| measure | baseline | fracnb | fracnb/baseline | reference case (before → after) | goal |",
        "|---|---:|---:|---:|---|---|",
    ]
    for row in rows:
        before, after = row.value(baseline), row.value(fracnb)
        ratio = _ratio(before, after) if row.ratio else ""
        cells = (row.measure, row.fmt.format(before), row.fmt.format(after), ratio, row.reference, row.goal)
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


def plot(runs: dict[str, Sequence[StepFigures]], path: Path) -> None:
    """GPUs allocated and in use over the day, every run on one chart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(10, 4.5), dpi=110)
    colours = {"baseline": "tab:grey", "fracnb": "tab:blue"}
    for name, steps in runs.items():
        hours = [DAY_START_HOUR + s.moment / 3600 for s in steps]
        colour = colours.get(name)
        axes.plot(hours, [s.allocated for s in steps], color=colour, label=f"{name}: GPUs allocated")
        axes.plot(hours, [s.busy_cards for s in steps], color=colour, linestyle="--", label=f"{name}: GPUs in use")
    axes.set_xlabel("time of day (h; past 24 is the next morning)")
    axes.set_ylabel("GPUs")
    axes.set_title("A research group's day: GPUs allocated and in use")
    axes.grid(alpha=0.3)
    axes.legend(loc="upper right", fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
