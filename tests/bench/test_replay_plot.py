"""The replay's plot (docs/evidence-replay.png): its legend sits below both panels' x-axis labels, never over
them, and the saved image holds all of it, its longest labels included. Literal step figures; no testbed."""

from __future__ import annotations

import struct
from pathlib import Path

import matplotlib.pyplot as plt

from bench.replay_measures import DEV_POOL, TRAIN_POOL, PoolStep, StepFigures
from bench.replay_report import draw, plot
from bench.replay_runs import runs

# Every run of the replay, as the docs' figure draws them: the longest labels ("..., saturating: cards busy").
LABELS = {setup.name: setup.label for setup in runs()}


def pool(held: int, busy: int) -> PoolStep:
    return PoolStep(16, held, busy, held, held, held, held, 0.0, 0.0, 0.0, 0.0)


def day(offset: int) -> dict[str, list[StepFigures]]:
    return {
        name: [
            StepFigures(moment, {DEV_POOL: pool(4 + index, 2 + index), TRAIN_POOL: pool(10 + offset, 8)})
            for moment in range(0, 24 * 3600, 3600)
        ]
        for index, name in enumerate(LABELS)
    }


def png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])  # the IHDR chunk
    return width, height


def test_the_legend_is_below_every_axis_label_and_the_image_holds_it(tmp_path: Path) -> None:
    days = {"normal": day(0), "busy": day(2)}
    figure = draw(days, LABELS)
    try:
        renderer = figure.canvas.get_renderer()
        [legend] = figure.legends
        box = legend.get_window_extent(renderer)
        assert len(legend.get_texts()) == 2 * len(LABELS)
        for axis in figure.axes:
            below = [axis.xaxis.label, *axis.get_xticklabels()]
            lowest = min(text.get_window_extent(renderer).y0 for text in below if text.get_text())
            assert box.y1 <= lowest, f"the legend reaches up to {box.y1:.0f} px, over the x-axis labels at {lowest:.0f}"
        # The image is saved around everything drawn: the legend's width in pixels, at the figure's dpi.
        path = tmp_path / "replay.png"
        plot(days, LABELS, path)
        width, height = png_size(path)
        assert width >= box.width
        assert height >= box.height + figure.axes[0].get_window_extent(renderer).height
    finally:
        plt.close(figure)
