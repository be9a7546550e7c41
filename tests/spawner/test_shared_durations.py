"""Configured durations in words on the hub side, held to the cases the front end is held to
(extension/test-data/durations.json): 150 s is "2.5 min", not "3 min" or "2 min"."""

from __future__ import annotations

import pytest

from fracnb_spawner.common.clock import countdown_text, duration_text
from tests.shared_cases import shared_cases


@pytest.mark.parametrize("case", shared_cases("durations.json")["cases"], ids=lambda c: str(c["seconds"]))
def test_durations(case) -> None:
    assert duration_text(case["seconds"]) == case["text"]


def test_countdowns_are_whole_minutes() -> None:
    assert [countdown_text(s) for s in (30, 150, 737, 3900)] == ["under a minute", "3 min", "12 min", "1 h 5 min"]
    assert duration_text(0) == "never"
