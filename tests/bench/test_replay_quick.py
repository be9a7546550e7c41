"""``python -m bench.replay --quick``: the whole replay, both reduced days and all three runs, end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.final_line import LAST_LINE

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]


def test_quick_replay_reports_every_run_of_both_days(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.replay", "--quick", "--seed", "3", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    last = done.stdout.rstrip("\n").splitlines()[-1]
    match = LAST_LINE.match(last)
    assert match, last
    report = (tmp_path / "replay.md").read_text()
    assert report.rstrip("\n").splitlines()[-1] == last
    for day in ("normal", "busy"):
        assert f"## {day} day" in report
    header = "| measure | baseline (z2jh) | fracnb (time-slicing) | fracnb (DRA) |"
    assert report.count(header) == 2
    for row in ("| packing efficiency", "| GPU-hours allocated but idle", "| slowdown p95", "| kernel state lost"):
        assert report.count(row) == 2, row
    assert report.count("baseline calibration: ") == 2
    assert (tmp_path / "replay.png").read_bytes().startswith(b"\x89PNG")
    assert match["busy_culled"] == "0"  # fracnb never stops a busy kernel
    assert int(match["served_after"]) == 6  # every researcher of the reduced normal day got a server
    assert 0 < float(match["packing"]) <= 1  # ⌈shares⌉ / cards held: never more cards filled than held
    assert float(match["slowdown"]) >= 1.0
