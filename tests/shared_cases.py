"""The test-case files that the Python and the TypeScript tests both read (extension/test-data/).

Each file holds one fact written on more than one side (a byte size in words, a GPU share, the
meter's levels, the culling warning): the notebook side, the front end and the hub side are each
held to the same cases, so they cannot drift apart.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

TEST_DATA = Path(__file__).resolve().parents[1] / "extension" / "test-data"


def shared_cases(name: str) -> dict[str, Any]:
    """The whole file ``extension/test-data/<name>``."""
    return json.loads((TEST_DATA / name).read_text())


def exact(text: str) -> Fraction:
    """ "3/4" -> Fraction(3, 4): an amount as the hub holds it (service-me.schema.json ``exact``)."""
    return Fraction(text)
