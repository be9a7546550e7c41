"""``python -m bench.replay --quick --days normal``: the whole replay of the reduced normal day, every run, end to end.

The busy day runs the same code on a larger day; it is left to `python -m bench.replay --quick` by hand (it would
double this test's ~5 minutes in CI)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.final_line import RUN_LINE

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
RUNS = (
    "baseline",
    "fracnb",
    "fracnb-dra",
    "fracnb-dra-lend",
    "fracnb-dra-adaptive",
    "baseline-saturating",
    "fracnb-dra-lend-saturating",
    "fracnb-dra-adaptive-lend-saturating",
    "fracnb-dra-adaptive-borrow",
)


def test_quick_replay_reports_every_run_one_line_each(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.replay", "--quick", "--days", "normal", "--seed", "3", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    printed = done.stdout.rstrip("\n").splitlines()[-len(RUNS) :]
    lines = {f"{m['day']}/{m['run']}": m for m in map(RUN_LINE.match, printed) if m}
    assert list(lines) == [f"{day}/{run}" for day in ("normal",) for run in RUNS], printed
    report = (tmp_path / "replay.md").read_text()
    assert report.rstrip("\n").splitlines()[-len(printed) :] == printed
    assert "## normal day" in report
    header = "| measure | baseline (z2jh) | fracnb (time-slicing) | fracnb (DRA) | fracnb (DRA, lend) |"
    assert report.count(header) == 1
    for row in (
        "| packing efficiency",
        "| training GPU-hours redone",
        "| reclaim p95",
        "| kernel state lost",
        "| ... contention rule",
    ):
        assert report.count(row) == 1, row
    assert report.count("baseline calibration: ") == 1
    assert (tmp_path / "replay.png").read_bytes().startswith(b"\x89PNG")
    for name, line in lines.items():
        if "/fracnb" in name:
            assert line["busy_culled"] == "0", name  # fracnb never stops a busy kernel
            assert line["lost"] == "0", name  # hibernation is on: an idle kernel's state is saved
        if name.startswith("normal/fracnb"):
            assert line["served"] == "6", name  # every researcher of the reduced normal day got a server
        assert float(line["slowdown"]) >= 1.0
        assert float(line["bound"]) >= 1.0
        if not name.endswith("-borrow"):
            assert line["borrowed"] == "0", name  # only the borrowing run takes training cards for notebooks
    lend, base = lines["normal/fracnb-dra-lend-saturating"], lines["normal/baseline-saturating"]
    assert float(lend["occupancy"]) > float(base["occupancy"])  # lent development cards run training jobs
    assert lines["normal/baseline"]["reclaim"] == "-"  # no lending, nothing reclaimed
