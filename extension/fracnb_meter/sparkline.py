"""A small chart of GPU memory over the session, as inline SVG, for the notebook widget (pure).

The same geometry and words as the panel's charts (extension/src/sparkline.ts): time runs from
the history's start (left) to its latest reading (right); memory from 0 (bottom) to the higher
of the budget and the peak, which sits at ``TOP_SHARE`` of the height so the budget line stays
visible. The series' points (memoryhistory.py) are joined by a line, the budget is a dashed
line and the peak a dot; the title says the same in words for screen readers and tooltips.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .wording import format_bytes

WIDTH, HEIGHT = 240, 40
TOP_SHARE = 0.9  # the higher of budget and peak is drawn at 90 % of the height


@dataclass(frozen=True)
class Geometry:
    """Where things go in a ``width`` x ``height`` box, y downwards as in SVG."""

    width: float
    height: float
    line: tuple[tuple[float, float], ...]  # empty before any reading
    budget_y: float | None
    peak: tuple[float, float] | None


def _round(value: float) -> float:
    return round(value, 1)


def geometry(
    series: Mapping[str, Any],
    now_s: float,
    budget_bytes: int | None,
    width: float = WIDTH,
    height: float = HEIGHT,
) -> Geometry:
    """Pure: the chart of one series (memory-history.schema.json's series) up to ``now_s``."""
    points = [(p["at_s"], p["bytes"]) for p in series["points"]]
    latest, peak = series["latest"], series["peak"]
    if latest is not None and (not points or latest["at_s"] > points[-1][0]):
        points.append((latest["at_s"], latest["bytes"]))
    budget = budget_bytes if budget_bytes else None
    top = max(budget or 0, peak["bytes"] if peak else 0, 1) / TOP_SHARE

    def x(at_s: float) -> float:
        return _round(width * at_s / now_s) if now_s > 0 else width

    def y(value: int) -> float:
        return _round(height * (1 - value / top))

    return Geometry(
        width,
        height,
        tuple((x(at), y(value)) for at, value in points),
        None if budget is None else y(budget),
        None if peak is None else (x(peak["at_s"]), y(peak["bytes"])),
    )


def duration_words(seconds: float) -> str:
    """12 -> '12 s', 300 -> '5 min', 7200 -> '2 h', 259200 -> '3 days' (the panel writes the same)."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size * (2 if unit == "days" else 1):
            return f"{round(seconds / size):g} {unit}"
    return f"{round(seconds):g} s"


def title(name: str, series: Mapping[str, Any], now_s: float, budget_bytes: int | None) -> str:
    """'GPU memory of this server over the last 5 min: now 1 GiB; peak 3 GiB, 2 min ago; budget 20 GiB.'"""
    latest, peak = series["latest"], series["peak"]
    head = f"GPU memory of {name} over the last {duration_words(now_s)}"
    if latest is None or peak is None:
        return f"{head}: no reading yet."
    ago = now_s - peak["at_s"]
    when = "now" if ago < 1 else f"{duration_words(ago)} ago"
    budget = f"budget {format_bytes(budget_bytes)}" if budget_bytes else "no budget"
    return f"{head}: now {format_bytes(latest['bytes'])}; peak {format_bytes(peak['bytes'])}, {when}; {budget}."


def svg(name: str, series: Mapping[str, Any], now_s: float, budget_bytes: int | None) -> str:
    """The chart as an inline SVG element with its title; class names as in the panel."""
    shape = geometry(series, now_s, budget_bytes)
    words = html.escape(title(name, series, now_s, budget_bytes))
    parts = [
        f'<svg class="fracnb-sparkline" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{words}" '
        f'width="{shape.width:g}" height="{shape.height:g}" viewBox="0 0 {shape.width:g} {shape.height:g}">',
        f"<title>{words}</title>",
        f'<rect width="{shape.width:g}" height="{shape.height:g}" fill="none" stroke="#bdbdbd"/>',
    ]
    if shape.budget_y is not None:
        parts.append(
            f'<line class="fracnb-sparkline-budget" x1="0" x2="{shape.width:g}" y1="{shape.budget_y:g}" '
            f'y2="{shape.budget_y:g}" stroke="#d32f2f" stroke-dasharray="4 3"/>'
        )
    if shape.line:
        coordinates = " ".join(f"{x:g},{y:g}" for x, y in shape.line)
        parts.append(
            f'<polyline class="fracnb-sparkline-line" points="{coordinates}" fill="none" stroke="#1976d2" '
            'stroke-width="1.5"/>'
        )
    if shape.peak is not None:
        parts.append(
            f'<circle class="fracnb-sparkline-peak" cx="{shape.peak[0]:g}" cy="{shape.peak[1]:g}" r="2.5" '
            'fill="#f57c00"/>'
        )
    return "".join(parts) + "</svg>"
