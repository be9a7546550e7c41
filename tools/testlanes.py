"""The test suite's pytest stages, run as concurrent lanes: ``./dev test`` calls this after setup and lint.

Most of the suite waits on real processes (control planes, hubs, kernels, browsers, idle timeouts) rather than
on the CPU, so three lanes of stages side by side take little more than the longest lane. The lanes share one list
of stages, the longest expected first, and each lane takes the next stage when its last one ends: the lanes end
close together whatever a machine makes of each stage's length. Each stage is a pytest process of its own:

- Playwright's sync API leaves an event loop marked running, which breaks pytest-asyncio tests (and a second
  Playwright session) later in the same process: ``browser`` and ``e2e`` are processes of their own;
- ``faults`` stops the apiserver and removes nodes, and ``kueue`` stops Kueue's manager: each runs its own
  cluster in a process of its own;
- ``compat`` runs the version-sensitive hub-side tests on the Zero-to-JupyterHub 4.4.0 hub image's versions, in
  another virtual environment.

Every stage gets its own ``--basetemp`` (the lanes would otherwise share pytest's numbered temp directories) and
its output, prefixed with the stage's name, goes to standard output and to ``<stage>.log`` in the run's folder.
A stage that fails does not stop the others, so one run shows every failure. At the end a table gives each
stage's wall time and pytest's summary, ``test-artifacts/test-stages.json`` keeps them, and the last line adds
up the counts.

    python tools/testlanes.py --venv .venv --compat-venv .venv-compat [--lanes 1|2] [-- pytest args...]
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"


@dataclass(frozen=True)
class Stage:
    name: str
    paths: tuple[str, ...]
    seconds: int  # expected wall time beside another stage on 2 idle cores (docs/testing.md): longest first
    compat: bool = False  # run in the compat virtual environment


# Everything not in a stage of its own runs in ``main``.
OWN_STAGES = ("tests/meter", "tests/browser", "tests/e2e", "tests/faults", "tests/kueue", "tests/bench")
STAGES = {
    "main": Stage("main", ("tests", *(f"--ignore={path}" for path in OWN_STAGES)), 720),
    "meter": Stage("meter", ("tests/meter",), 280),
    "browser": Stage("browser", ("tests/browser",), 270),
    "e2e": Stage("e2e", ("tests/e2e",), 840),
    "faults": Stage("faults", ("tests/faults",), 455),
    "kueue": Stage("kueue", ("tests/kueue",), 180),
    "bench": Stage("bench", ("tests/bench",), 215),
    "compat": Stage("compat", ("tests/spawner", "tests/spawner_k8s"), 145, compat=True),
}

_SUMMARY = re.compile(r"^=+ (?P<counts>.*?) in (?P<seconds>[\d.]+)s(?: \([^)]*\))? =+$")
_COUNT = re.compile(r"(?P<n>\d+) (?P<what>passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)")


@dataclass
class StageResult:
    name: str
    lane: int
    status: str = "not run"  # passed, failed, or not run (yet)
    seconds: float = 0.0
    summary: str = ""
    counts: Counter[str] = field(default_factory=Counter)


def parse_summary(line: str) -> tuple[str, Counter[str]] | None:
    """pytest's closing line (``=== 3 passed, 1 skipped in 4.20s ===``): its counts, or None for another line."""
    match = _SUMMARY.match(line.strip())
    if not match:
        return None
    counts: Counter[str] = Counter()
    for count in _COUNT.finditer(match["counts"]):
        what = count["what"]
        counts[{"error": "errors", "warning": "warnings"}.get(what, what)] += int(count["n"])
    return match["counts"], counts


def stage_order(stages: Iterable[Stage] = STAGES.values()) -> list[Stage]:
    """The order in which the lanes take the stages: the longest expected first, so that the short ones fill
    in at the end (the lanes then end within about the shortest stage of each other)."""
    return sorted(stages, key=lambda stage: -stage.seconds)


def planned_lanes(stages: Sequence[Stage], count: int) -> list[list[Stage]]:
    """Which lane would take which stage if each took its expected time: the plan, for docs and tests (a run
    hands out the stages as lanes come free, so a slow stage moves the rest)."""
    lanes: list[list[Stage]] = [[] for _ in range(count)]
    ends = [0] * count
    for stage in stage_order(stages):
        lane = ends.index(min(ends))
        lanes[lane].append(stage)
        ends[lane] += stage.seconds
    return lanes


def table(results: Sequence[StageResult], wall: float) -> str:
    """The closing table: each stage's lane, wall time and pytest summary, then the whole run's wall time."""
    rows = ["| stage | lane | seconds | result |", "|---|---:|---:|---|"]
    rows += [f"| {r.name} | {r.lane} | {r.seconds:.0f} | {r.summary or r.status} |" for r in results]
    rows.append(f"| all stages | | {wall:.0f} | wall time, lanes side by side |")
    return "\n".join(rows)


def closing_line(results: Iterable[StageResult]) -> str:
    """The counts of every stage together, in the plain form CI reads."""
    total: Counter[str] = Counter()
    for result in results:
        total.update(result.counts)
    failed = total["failed"] + total["errors"]
    return f"tests: {total['passed']} passed, {failed} failed, {total['skipped']} skipped"


class LaneRunner:
    def __init__(self, python: Path, compat_python: Path, run_dir: Path, pytest_args: Sequence[str]) -> None:
        self.python, self.compat_python = python, compat_python
        self.run_dir, self.pytest_args = run_dir, list(pytest_args)
        self.print_lock = threading.Lock()

    def say(self, text: str) -> None:
        with self.print_lock:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()

    def command(self, stage: Stage) -> list[str]:
        python = self.compat_python if stage.compat else self.python
        basetemp = self.run_dir / f"{stage.name}-tmp"  # pytest makes it, in a folder that exists
        return [str(python), "-m", "pytest", *stage.paths, f"--basetemp={basetemp}", *self.pytest_args]

    def run_stage(self, stage: Stage, result: StageResult) -> None:
        self.say(f"[{stage.name}] starting (lane {result.lane}): {' '.join(self.command(stage)[1:])}")
        started = time.monotonic()
        command = self.command(stage)
        with (
            (self.run_dir / f"{stage.name}.log").open("w") as log,
            subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process,
        ):
            for line in process.stdout or ():
                log.write(line)
                self.say(f"[{stage.name}] {line.rstrip()}")
                parsed = parse_summary(line)
                if parsed:
                    result.summary, result.counts = parsed
            code = process.wait()
        result.seconds = time.monotonic() - started
        # pytest's 5 is "no tests collected", as when pytest args select nothing in a stage.
        result.status = "passed" if code in (0, 5) else "failed"
        self.say(f"[{stage.name}] {result.status} in {result.seconds:.0f} s")

    def run_lane(self, lane: int, waiting: deque[Stage], results: list[StageResult]) -> None:
        """Take the next waiting stage and run it, until none is left."""
        while True:
            with self.print_lock:
                if not waiting:
                    return
                stage = waiting.popleft()
                result = StageResult(stage.name, lane)
                results.append(result)
            self.run_stage(stage, result)

    def run_lanes(self, stages: Sequence[Stage], count: int) -> tuple[list[StageResult], float]:
        """``count`` lanes, each a thread, taking ``stages`` in order as they come free; each stage's result,
        in the order they started, and the wall time."""
        waiting, results = deque(stages), []
        started = time.monotonic()
        threads = [
            threading.Thread(target=self.run_lane, args=(lane, waiting, results)) for lane in range(1, count + 1)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return results, time.monotonic() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, required=True)
    parser.add_argument("--compat-venv", type=Path, required=True)
    parser.add_argument("--lanes", type=int, choices=(1, 2, 3), default=3)
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args(argv)

    # Each stage's hubs stop their services, and the testbed its pods, with SIGINT: a run started with SIGINT
    # ignored (nohup, a shell's background job) would hand that on to all of them. A handler set here is
    # reset to the default in every process started from here.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stages = stage_order()
    run_dir = Path(tempfile.mkdtemp(prefix="fracnb-test-"))
    runner = LaneRunner(args.venv / "bin" / "python", args.compat_venv / "bin" / "python", run_dir, args.pytest_args)
    runner.say(f"running {len(stages)} stages in {args.lanes} lane(s), the longest first; logs in {run_dir}")
    ordered, wall = runner.run_lanes(stages, args.lanes)
    ARTIFACTS.mkdir(exist_ok=True)
    record = {"wall_seconds": round(wall), "stages": [{**vars(r), "counts": dict(r.counts)} for r in ordered]}
    (ARTIFACTS / "test-stages.json").write_text(json.dumps(record, indent=1) + "\n")
    runner.say("\n" + table(ordered, wall) + "\n")
    runner.say(closing_line(ordered))
    return 0 if all(r.status == "passed" for r in ordered) else 1


if __name__ == "__main__":
    sys.exit(main())
