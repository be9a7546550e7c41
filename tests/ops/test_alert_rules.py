"""helm-values/prometheus-rules.yaml: valid for promtool, and each alert's unit tests (tests/ops/alerts/) pass."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from .conftest import run_promtool
from .promql import ALERT_TESTS, rule_groups

ALERTS = [rule["alert"] for group in rule_groups()["groups"] for rule in group["rules"]]


def test_the_rules_file_passes_promtool_check(promtool: Path, rules_dir: Path) -> None:
    checked = run_promtool(promtool, "check", "rules", "rules.yaml", cwd=rules_dir)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in checked.stdout


@pytest.mark.parametrize("test_file", sorted(path.name for path in ALERT_TESTS.glob("*.yaml")))
def test_alert_unit_tests_pass(promtool: Path, rules_dir: Path, test_file: str) -> None:
    tested = run_promtool(promtool, "test", "rules", test_file, cwd=rules_dir)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    fired: dict[str, set[bool]] = {alert: set() for alert in ALERTS}
    for path in ALERT_TESTS.glob("*.yaml"):
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test") or []:
                fired.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    assert set(fired) == set(ALERTS), "the unit tests name an alert the rules do not have"
    assert {alert: seen for alert, seen in fired.items() if seen != {True, False}} == {}


def test_a_broken_rule_fails_its_unit_test(promtool: Path, rules_dir: Path) -> None:
    """The unit tests can fail: with the quota threshold raised past 100 %, the quota test does."""
    rules = (rules_dir / "rules.yaml").read_text()
    assert ">= 0.9" in rules
    (rules_dir / "rules.yaml").write_text(rules.replace(">= 0.9", ">= 1.1"))
    tested = run_promtool(promtool, "test", "rules", "quota.yaml", cwd=rules_dir)
    assert tested.returncode != 0
    assert "FracnbGroupQuotaNearlyFull" in tested.stdout + tested.stderr
