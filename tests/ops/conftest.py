"""Fixtures for the operators' files (helm-values/grafana-dashboard.json, helm-values/prometheus-rules.yaml).

- ``promtool``: Prometheus's promtool, built from its Go module by tools/promtool/build.sh (reused
  from its cache; ``./dev setup`` builds it) or named by $FRACNB_PROMTOOL.
- ``rules_dir``: a folder with the PrometheusRule's rules as a plain rules file, ``rules.yaml``,
  and the unit tests of tests/ops/alerts/ beside it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from .promql import ALERT_TESTS, REPO, rule_groups

BUILD_SCRIPT = REPO / "tools" / "promtool" / "build.sh"


@pytest.fixture(scope="session")
def promtool() -> Path:
    named = os.environ.get("FRACNB_PROMTOOL")
    if named:
        return Path(named)
    built = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False)
    if built.returncode != 0 or not built.stdout.strip():
        pytest.fail(f"{BUILD_SCRIPT.relative_to(REPO)} could not build promtool (its output is above)", pytrace=False)
    return Path(built.stdout.strip().splitlines()[-1])


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_groups(), sort_keys=False))
    for test in ALERT_TESTS.glob("*.yaml"):
        shutil.copy(test, tmp_path / test.name)
    return tmp_path


def run_promtool(promtool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=120)
