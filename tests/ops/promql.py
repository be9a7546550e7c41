"""What the dashboard, the alert rules and their unit tests ask of Prometheus, and what /metrics exports.

- :func:`metric_names` and :func:`label_names`: the metrics and labels a PromQL expression names
  (a tokenizer, not a parser: promtool checks the syntax).
- :func:`exported_series`: the series names a ``/metrics`` text exports, with the label names its
  samples carry (``None`` for a labelled metric with no sample yet).
- :func:`dashboard_queries`, :func:`rule_groups`, :func:`alert_test_series`: the expressions and
  series in helm-values/ and tests/ops/alerts/.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "helm-values" / "grafana-dashboard.json"
RULES = REPO / "helm-values" / "prometheus-rules.yaml"
ALERT_TESTS = Path(__file__).parent / "alerts"

# Grafana's range macros, as promtool needs them: concrete durations.
GRAFANA_MACROS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1d"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
LABEL_LISTS = r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)"
WORD = r"(?<![A-Za-z0-9_:.])[A-Za-z_:][A-Za-z0-9_:]*"
# Labels Prometheus adds to every scraped series (target labels), not the exporter.
TARGET_LABELS = {"job", "instance", "namespace", "pod", "service", "endpoint", "container"}
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}


def expand_macros(expr: str) -> str:
    for macro, duration in GRAFANA_MACROS.items():
        expr = expr.replace(macro, duration)
    return expr


def _without_strings(expr: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (not functions, aggregations, keywords or labels)."""
    text = _without_strings(expand_macros(expr))
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(LABEL_LISTS, " ", text)
    names = set()
    for match in re.finditer(WORD, text):
        if text[match.end() :].lstrip().startswith("(") or match.group().lower() in KEYWORDS:
            continue
        names.add(match.group())
    return names


def label_names(expr: str) -> dict[str, set[str]]:
    """Per metric, the label names its matchers name; under ``""`` those of by/without/on lists."""
    text = _without_strings(expand_macros(expr))
    found: dict[str, set[str]] = {"": set()}
    for labels in re.findall(LABEL_LISTS, text):
        found[""].update(name.strip() for name in labels.split(",") if name.strip())
    for name, matchers in re.findall(rf"({WORD})\s*\{{([^}}]*)\}}", text):
        found.setdefault(name, set()).update(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", matchers))
    return found


def exported_series(exposition: str) -> dict[str, frozenset[str] | None]:
    """Series name -> the label names of its samples (target labels aside), ``None`` if it has none yet."""
    series: dict[str, frozenset[str] | None] = {}
    for family in text_string_to_metric_families(exposition):
        base = family.name
        for suffix in SUFFIXES.get(family.type, ("",)):
            series.setdefault(base + suffix, None)
        for sample in family.samples:
            labels = frozenset(sample.labels) - {"le", "quantile"}
            seen = series.get(sample.name) or frozenset()
            series[sample.name] = seen | labels
    return series


def dashboard_queries(dashboard: dict[str, Any] | None = None) -> Iterator[tuple[str, str]]:
    """(panel title, expr) of every query of every panel, rows' panels included."""
    dashboard = dashboard or json.loads(DASHBOARD.read_text())

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels") or [])

    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets") or []:
            yield panel["title"], target["expr"]


def rule_groups() -> dict[str, Any]:
    """The PrometheusRule's ``spec``: a plain Prometheus rules file (``groups:``)."""
    document = yaml.safe_load(RULES.read_text())
    assert document["apiVersion"] == "monitoring.coreos.com/v1"
    assert document["kind"] == "PrometheusRule"
    return document["spec"]


def rule_expressions() -> Iterator[tuple[str, str]]:
    for group in rule_groups()["groups"]:
        for rule in group["rules"]:
            yield rule.get("alert") or rule["record"], rule["expr"]


def alert_test_series() -> Iterator[tuple[Path, str, set[str]]]:
    """(test file, series name, its label names) of every input series of the alert unit tests."""
    for path in sorted(ALERT_TESTS.glob("*.yaml")):
        for test in yaml.safe_load(path.read_text())["tests"]:
            for entry in test.get("input_series") or []:
                match = re.fullmatch(r"\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*(?:\{(.*)\})?\s*", entry["series"])
                assert match, f"{path.name}: cannot read the series {entry['series']!r}"
                labels = set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*=", match.group(2) or ""))
                yield path, match.group(1), labels
