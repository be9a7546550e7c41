"""tools/testlanes.py: pytest's closing line read back, the lanes' plan, and two real lanes of pytest processes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load_testlanes():
    spec = importlib.util.spec_from_file_location("testlanes", REPO / "tools" / "testlanes.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["testlanes"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


testlanes = _load_testlanes()


@pytest.mark.parametrize(
    ("line", "counts"),
    [
        ("======= 1626 passed, 4 skipped in 847.12s (0:14:07) =======", {"passed": 1626, "skipped": 4}),
        ("=== 2 failed, 10 passed, 1 error in 3.50s ===", {"failed": 2, "passed": 10, "errors": 1}),
        ("==== 3 passed, 2 warnings in 0.10s ====", {"passed": 3, "warnings": 2}),
        ("===== no tests ran in 0.01s =====", {}),
    ],
)
def test_pytest_closing_line_is_read_back(line, counts):
    summary, found = testlanes.parse_summary(line)
    assert dict(found) == counts
    assert summary in line


@pytest.mark.parametrize("line", ["tests/x.py ....   [ 10%]", "FAILED tests/x.py::t - 3 passed in 2s", ""])
def test_other_lines_are_not_a_summary(line):
    assert testlanes.parse_summary(line) is None


def test_every_test_folder_is_in_exactly_one_stage():
    folders = {p.relative_to(REPO).as_posix() for p in (REPO / "tests").iterdir() if (p / "__init__.py").exists()}
    stages = testlanes.stage_order()
    newest = [stage for stage in stages if not stage.compat]
    assert len({stage.name for stage in stages}) == len(stages) == len(testlanes.STAGES)
    for folder in folders - {"tests/gpu"}:  # tests/gpu runs on a GPU machine (docs/testing.md)
        owners = [
            s.name for s in newest if folder in s.paths or ("tests" in s.paths and f"--ignore={folder}" not in s.paths)
        ]
        assert len(owners) == 1, (folder, owners)


def test_the_longest_stages_go_first_and_the_planned_lanes_end_close_together():
    stage = testlanes.Stage
    stages = [stage("a", (), 100), stage("b", (), 600), stage("c", (), 300), stage("d", (), 250), stage("e", (), 50)]
    assert [s.name for s in testlanes.stage_order(stages)] == ["b", "c", "d", "a", "e"]
    lanes = testlanes.planned_lanes(stages, 2)
    assert [[s.name for s in lane] for lane in lanes] == [["b", "e"], ["c", "d", "a"]]
    assert [sum(s.seconds for s in lane) for lane in lanes] == [650, 650]
    (one,) = testlanes.planned_lanes(stages, 1)
    assert [s.name for s in one] == ["b", "c", "d", "a", "e"]
    ends = [sum(s.seconds for s in lane) for lane in testlanes.planned_lanes(testlanes.STAGES.values(), 2)]
    assert max(ends) - min(ends) <= min(s.seconds for s in testlanes.STAGES.values())


def test_closing_line_adds_every_stage_and_counts_errors_as_failures():
    results = [
        testlanes.StageResult("a", 1, "passed", 1.0, "", testlanes.Counter(passed=3, skipped=1)),
        testlanes.StageResult("b", 2, "failed", 2.0, "", testlanes.Counter(passed=2, failed=1, errors=1)),
    ]
    assert testlanes.closing_line(results) == "tests: 5 passed, 2 failed, 1 skipped"


def test_a_failed_stage_stops_nothing_and_each_stage_keeps_its_log(tmp_path, capsys):
    (tmp_path / "test_good.py").write_text("def test_good():\n    pass\n")
    (tmp_path / "test_bad.py").write_text("def test_bad():\n    assert False\n")
    good, bad = str(tmp_path / "test_good.py"), str(tmp_path / "test_bad.py")
    stages = [testlanes.Stage(name, (path,), 1) for name, path in [("bad", bad), ("after-bad", good), ("good", good)]]
    python = Path(sys.executable)
    runner = testlanes.LaneRunner(python, python, tmp_path / "run", ["-p", "no:cacheprovider"])
    (tmp_path / "run").mkdir()
    results, _ = runner.run_lanes([*stages, testlanes.Stage("good-again", (good,), 1)], 2)
    status = {r.name: r.status for r in results}
    assert status == {"bad": "failed", "after-bad": "passed", "good": "passed", "good-again": "passed"}
    assert sorted(r.lane for r in results) == [1, 1, 2, 2]  # each lane took two, as each came free
    assert testlanes.closing_line(results) == "tests: 3 passed, 1 failed, 0 skipped"
    assert "[bad] " in capsys.readouterr().out
    assert "assert False" in (tmp_path / "run" / "bad.log").read_text()
