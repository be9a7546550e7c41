"""Fixtures for the helm-values tests.

- ``chart``: (default values, schema) of the Zero-to-JupyterHub 4.4.0 chart, read from
  ``shared/z2jh-4.4.0`` beside the repository; the tests skip with the reason when absent.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
VALUES_DIR = REPO / "helm-values"
CHART_DIR = REPO.parent / "shared" / "z2jh-4.4.0"


def merged(base: dict, override: dict) -> dict:
    """Helm's merge: mappings merge key by key, anything else (lists too) is replaced."""
    result = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def values_of(scenario: str) -> dict:
    return yaml.safe_load((VALUES_DIR / f"{scenario}.yaml").read_text())


@pytest.fixture(scope="module")
def chart() -> tuple[dict, dict]:
    if not (CHART_DIR / "values.schema.yaml").is_file():
        pytest.skip(
            f"the Zero-to-JupyterHub 4.4.0 chart files are not at {CHART_DIR} (values.yaml, values.schema.yaml)"
        )
    defaults = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    schema = yaml.safe_load((CHART_DIR / "values.schema.yaml").read_text())
    return defaults, schema
