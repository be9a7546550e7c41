"""The configuration docs/operations.md gives an admin: the Zero-to-JupyterHub values pass the
chart's schema on top of a GPU setup's values, and promtool accepts the scrape configuration."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.helm.conftest import CHART_DIR, merged, values_of

from .conftest import run_promtool
from .promql import REPO

OPERATIONS = REPO / "docs" / "operations.md"


def block(marker: str) -> object:
    """The YAML of the fenced block after ``<!-- tests/ops: marker -->`` in docs/operations.md."""
    found = re.search(rf"<!-- tests/ops: {re.escape(marker)} -->\n```yaml\n(.*?)```", OPERATIONS.read_text(), re.S)
    assert found, f"docs/operations.md has no block marked {marker!r}"
    return yaml.safe_load(found.group(1))


def test_the_prometheus_values_pass_the_chart_schema_and_keep_the_fracnb_rule() -> None:
    if not (CHART_DIR / "values.schema.yaml").is_file():
        pytest.skip(f"the Zero-to-JupyterHub 4.4.0 chart files are not at {CHART_DIR}")
    defaults = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    schema = yaml.safe_load((CHART_DIR / "values.schema.yaml").read_text())
    setup = values_of("time-slicing")
    values = merged(merged(defaults, setup), block("z2jh values"))
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert [error.message for error in validator.iter_errors(values)] == []
    # Helm replaces lists: the block repeats the setup's own ingress rule, unchanged.
    assert setup["hub"]["networkPolicy"]["ingress"][0] in values["hub"]["networkPolicy"]["ingress"]
    assert values["hub"]["services"]["fracnb"] == setup["hub"]["services"]["fracnb"]
    assert values["hub"]["loadRoles"]["prometheus"]["scopes"] == ["read:metrics", "access:services!service=fracnb"]


def test_promtool_accepts_the_scrape_configuration(promtool: Path, tmp_path: Path) -> None:
    config = {"global": {"scrape_interval": "30s"}, "scrape_configs": block("scrape configs")}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    # --syntax-only: the token file exists only where Prometheus mounts it.
    checked = run_promtool(promtool, "check", "config", "--syntax-only", "prometheus.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    jobs = {job["job_name"]: job["metrics_path"] for job in config["scrape_configs"]}
    assert jobs == {"jupyterhub": "/hub/metrics", "fracnb-service": "/services/fracnb/metrics"}
