"""helm-values/grafana-dashboard.json: importable as-is, on a templated Prometheus datasource, every
query valid PromQL for promtool, and every panel saying which question it answers."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from .conftest import run_promtool
from .promql import DASHBOARD, dashboard_queries, expand_macros, metric_names

DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


def load() -> dict:
    return json.loads(DASHBOARD.read_text())


def all_panels(dashboard: dict) -> list[dict]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_the_dashboard_imports_without_a_datasource_mapping() -> None:
    dashboard = load()
    # A fixed id or a datasource uid of someone's Grafana would clash on import or point nowhere.
    assert dashboard["id"] is None
    assert dashboard["uid"]
    assert dashboard["title"]
    assert "__inputs" not in dashboard, "an __inputs mapping makes provisioning from a file fail"
    [variable] = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert (variable["name"], variable["query"]) == ("DS_PROMETHEUS", "prometheus")
    for panel in all_panels(dashboard):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
    text = DASHBOARD.read_text()
    assert text.count("${DS_PROMETHEUS}") == text.count('"uid": "${DS_PROMETHEUS}"')


def test_panels_do_not_overlap_and_say_what_they_answer() -> None:
    dashboard = load()
    taken: set[tuple[int, int]] = set()
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {(grid["y"] + dy, grid["x"] + dx) for dy in range(grid["h"]) for dx in range(grid["w"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
    for panel in all_panels(dashboard):
        assert "?" in panel["description"], f"{panel['title']}: say which question the panel answers"
        assert panel["targets"], panel["title"]


def test_every_query_names_fracnb_metrics_only() -> None:
    for title, expr in dashboard_queries():
        names = metric_names(expr)
        assert names, f"{title}: {expr}"
        assert all(name.startswith("fracnb_") for name in names), f"{title}: {sorted(names)}"


def test_every_query_parses_with_promtool(promtool: Path, tmp_path: Path) -> None:
    """Each query as a recording rule (Grafana's range macros made durations): promtool parses them all."""
    queries = list(dashboard_queries())
    rules = [
        {"record": f"fracnb_dashboard:query_{n}", "expr": expand_macros(expr)} for n, (_, expr) in enumerate(queries)
    ]
    (tmp_path / "dashboard-queries.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]})
    )
    checked = run_promtool(promtool, "check", "rules", "dashboard-queries.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(queries)} rules found" in checked.stdout


def test_promtool_refuses_a_broken_query(promtool: Path, tmp_path: Path) -> None:
    """The check above can fail: a query with an unbalanced parenthesis does not parse."""
    broken = {
        "groups": [
            {"name": "dashboard", "rules": [{"record": "x:y", "expr": "sum(rate(fracnb_culled_servers_total[1h])"}]}
        ]
    }
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(broken))
    assert run_promtool(promtool, "check", "rules", "broken.yaml", cwd=tmp_path).returncode != 0
