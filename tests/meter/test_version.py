"""One version: extension/package.json's, which the Python package's metadata and fracnb_meter carry."""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

from packaging.version import Version

import fracnb_meter

PACKAGE_JSON = Path(__file__).resolve().parents[2] / "extension" / "package.json"


def test_the_package_json_version_is_the_python_packages() -> None:
    npm = json.loads(PACKAGE_JSON.read_text())["version"]
    assert fracnb_meter.__version__ == version("fracnb")
    assert Version(fracnb_meter.__version__) == Version(npm)  # npm's "0.2.0-beta.1" is PEP 440's 0.2.0b1
