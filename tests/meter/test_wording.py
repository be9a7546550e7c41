"""The notebook's culling warning, held to the cases the front end is held to too."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from fracnb_meter.schema import SERVICE_REPORT, load, problems
from fracnb_meter.wording import clock_time, cull_warning, session_peak

CASES = json.loads((Path(__file__).resolve().parents[2] / "extension/test-data/cull-warnings.json").read_text())[
    "cases"
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{(c['deadline'] or {}).get('reason')}-{c['time_zone']}")
def test_shared_cases(case) -> None:
    deadline = case["deadline"]
    if deadline is not None:
        assert problems(SERVICE_REPORT, deadline, "/$defs/deadline", check_formats=True) == []
    assert cull_warning(deadline, ZoneInfo(case["time_zone"])) == case["text"]


def test_the_cases_cover_every_reason_the_schema_knows() -> None:
    reasons = set(load(SERVICE_REPORT)["$defs"]["deadline"]["properties"]["reason"]["enum"])
    assert reasons == {c["deadline"]["reason"] for c in CASES if c["deadline"]}


def test_demand_warning_is_the_issues_sentence() -> None:
    deadline = {"reason": "demand", "cull_at": "2026-11-23T14:05:00Z", "seconds_left": 300, "warning": True}
    assert cull_warning(deadline, timezone.utc) == (
        "Someone is waiting for a GPU; this idle server stops at 14:05 unless you use it."
    )


def test_clock_time_is_local_by_default() -> None:
    moment = datetime(2026, 11, 23, 9, 7, tzinfo=timezone.utc)
    assert clock_time(moment) == moment.astimezone().strftime("%H:%M")
    assert clock_time(moment, ZoneInfo("Asia/Kolkata")) == "14:37"


PEAK_CASES = json.loads((Path(__file__).resolve().parents[2] / "extension/test-data/session-peaks.json").read_text())[
    "cases"
]


@pytest.mark.parametrize("case", PEAK_CASES, ids=lambda c: f"{c['peak_bytes']}-of-{c['budget_bytes']}")
def test_session_peak_shared_cases(case) -> None:
    assert session_peak(case["peak_bytes"], case["budget_bytes"]) == case["text"]
