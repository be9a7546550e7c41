"""The notebook's wording (sizes, GPU shares, the culling warning, the session's peak), held to the
cases the front end and the hub are held to too (extension/test-data/)."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from fracnb_meter.hibernation.notice import stop_follows
from fracnb_meter.wording import (
    clock_time,
    cull_warning,
    format_amount,
    format_bytes,
    format_gpus,
    format_share,
    format_use,
    restore_offer,
    restore_summary,
    session_peak,
)
from fracnb_schemas import SERVICE_REPORT, load, problems
from tests.shared_cases import exact, shared_cases

CASES = shared_cases("cull-warnings.json")["cases"]


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
        "Someone is waiting for a GPU; this idle server stops at 14:05 UTC unless you use it."
    )


def test_clock_time_is_local_by_default_and_names_its_zone() -> None:
    moment = datetime(2026, 11, 23, 9, 7, tzinfo=timezone.utc)
    assert clock_time(moment) == moment.astimezone().strftime("%H:%M %Z")
    assert clock_time(moment, ZoneInfo("Asia/Kolkata")) == "14:37 IST"


PEAK_CASES = shared_cases("session-peaks.json")["cases"]


@pytest.mark.parametrize("case", PEAK_CASES, ids=lambda c: f"{c['peak_bytes']}-of-{c['budget_bytes']}")
def test_session_peak_shared_cases(case) -> None:
    assert session_peak(case["peak_bytes"], case["budget_bytes"]) == case["text"]


@pytest.mark.parametrize("case", shared_cases("byte-sizes.json")["cases"], ids=lambda c: str(c["bytes"]))
def test_byte_sizes_shared_cases(case) -> None:
    assert format_bytes(case["bytes"]) == case["text"]


SHARES = shared_cases("gpu-shares.json")


@pytest.mark.parametrize("case", SHARES["amounts"], ids=lambda c: c["exact"])
def test_gpu_amounts_shared_cases(case) -> None:
    assert case["gpus"] == float(exact(case["exact"])), "the case is consistent"
    assert format_amount(case["gpus"]) == case["amount"]
    assert format_gpus(case["gpus"]) == case["gpus_text"]
    assert format_share(case["gpus"]) == case["share"]


@pytest.mark.parametrize("case", SHARES["uses"], ids=lambda c: f"{c['used']}-of-{c['limit']}")
def test_gpu_uses_shared_cases(case) -> None:
    assert format_use(float(exact(case["used"])), float(exact(case["limit"]))) == case["text"]


OFFERS = shared_cases("restore-offers.json")["cases"]


@pytest.mark.parametrize("case", OFFERS, ids=lambda c: c["text"])
def test_restore_offers_read_as_the_front_ends(case) -> None:
    text = restore_offer(
        datetime.fromisoformat(case["saved_at"]),
        case["bytes"],
        datetime.fromisoformat(case["now"]),
        ZoneInfo(case["time_zone"]),
    )
    assert text == case["text"]


def test_restore_summary_lists_what_came_back_and_what_did_not() -> None:
    report = {
        "status": "partly_restored",
        "reason": None,
        "restored": ["model", "frame"],
        "failed": [{"name": "loader", "type": "x.Loader", "reason": "ModuleNotFoundError: No module named 'x'"}],
        "skipped_at_save": [{"name": "gen", "type": "builtins.generator", "reason": "a generator"}],
        "warnings": ["numpy 2.4.6 \N{RIGHTWARDS ARROW} 2.5.0"],
        "notices": ["GPU arrays (2 GiB) were restored to host memory: this server has no GPU."],
        "bytes": 2 << 30,
        "saved_at": "2026-11-25T14:05:00+00:00",
        "seconds": 3.1,
    }
    assert restore_summary(report) == [
        "Restored 2 variables (2 GiB): model, frame.",
        "Not restored: loader (ModuleNotFoundError: No module named 'x').",
        "Not saved at the stop: gen (a generator).",
        "GPU arrays (2 GiB) were restored to host memory: this server has no GPU.",
        "Saved with other versions: numpy 2.4.6 \N{RIGHTWARDS ARROW} 2.5.0.",
    ]
    confirm = {**report, "status": "confirm", "reason": "the saved state was made with other versions"}
    assert restore_summary(confirm) == [
        "the saved state was made with other versions",
        "  numpy 2.4.6 \N{RIGHTWARDS ARROW} 2.5.0",
    ]


def test_a_zone_with_only_an_offset_is_written_as_the_browser_writes_it() -> None:
    moment = datetime(2026, 11, 25, 9, 0, tzinfo=timezone.utc)
    assert clock_time(moment, ZoneInfo("Asia/Dubai")) == "13:00 GMT+4"
    assert clock_time(moment, ZoneInfo("America/Sao_Paulo")) == "06:00 GMT-3"
    assert clock_time(moment, ZoneInfo("America/New_York")) == "04:00 EST"


@pytest.mark.parametrize(
    "case",
    shared_cases("called-off-stops.json")["cases"],
    ids=lambda case: f"{case['stop']}-{'-'.join(case['statuses'])}",
)
def test_no_notice_is_kept_of_a_hibernation_no_stop_follows(case):
    report = {"kernels": [{"status": status} for status in case["statuses"]]}
    assert stop_follows(report, case["stop"]) is not case["called_off"]
