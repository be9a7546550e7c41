"""``python -m bench.replay --quick``: the whole replay on a reduced day, twice with the same seed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
LAST_LINE = re.compile(
    r"^replay: notebooks/GPU (?P<nb_before>[\d.]+) -> (?P<nb_after>[\d.]+); "
    r"idle GPU-hours -?(?P<idle_cut>-?[\d.]+)%; "
    r"in-use h/card/day (?P<use_before>[\d.]+) -> (?P<use_after>[\d.]+); "
    r"wait p95 (?P<p95>[\d.]+) s; busy culled (?P<busy_culled>\d+)$"
)


def replay(out: Path) -> tuple[str, dict[str, float]]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.replay", "--quick", "--seed", "3", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    last = done.stdout.rstrip("\n").splitlines()[-1]
    match = LAST_LINE.match(last)
    assert match, last
    return done.stdout, {key: float(value) for key, value in match.groupdict().items()}


def test_quick_replay_reports_both_runs_and_repeats_itself(tmp_path: Path) -> None:
    output, first = replay(tmp_path / "first")
    table = (tmp_path / "first" / "replay.md").read_text()
    assert table.splitlines()[2] == next(line for line in output.splitlines() if line.startswith("| measure |"))
    for measure in ("notebooks per GPU", "GPU-hours allocated but idle", "spawn wait p95", "busy kernels culled"):
        assert measure in table
    assert (tmp_path / "first" / "replay.png").read_bytes().startswith(b"\x89PNG")
    assert first["busy_culled"] == 0  # fracnb never stops a busy kernel
    assert first["use_before"] > 0
    assert first["use_after"] > 0
    _, second = replay(tmp_path / "second")
    # The same seed: the same day and the same decisions, up to which of equal nodes the scheduler picks
    # and how long a start takes in real time.
    for key in ("idle_cut", "use_before", "use_after"):
        assert second[key] == pytest.approx(first[key], rel=0.1, abs=1.0), key
    assert second["busy_culled"] == first["busy_culled"]
