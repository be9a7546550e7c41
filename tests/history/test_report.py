"""The admins' report: pure arithmetic on literal query rows, then the same from SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta

import pytest

from fracnb_schemas import HISTORY_REPORT, problems
from fracnb_spawner.history import store
from fracnb_spawner.history.report import (
    ChoiceTotals,
    as_csv,
    as_json,
    as_text,
    build_report,
    fold_groups,
    load_report,
)
from fracnb_spawner.service.reportcli import main
from tests.history.records import GIB, row

HALF = ChoiceTotals("a100", "size=half", 0.5, 40 * GIB, 10, 5.0, 1.0, 1)
EIGHTH = ChoiceTotals("a100", "size=eighth", 0.125, 10 * GIB, 4, 0.5, 0.4, 0)
ADVISED_EIGHTH = (
    "a100 size=half (0.5 GPU): 95 % of 10 sessions peaked at 6 GiB or less; "
    "users are advised a100 size=eighth (10 GiB), which 100 % of them fit."
)


def test_rows_from_literal_totals_and_histograms() -> None:
    # Half: 7 of 10 sessions peaked at 15-16 % of 40 GiB (6.4 GiB), 3 at 60 %; eighth: all at 50 %.
    histograms = {("a100", "size=half"): {150: 7, 600: 3}, ("a100", "size=eighth"): {499: 4}}
    report = build_report([HALF, EIGHTH], histograms)
    eighth, half = report.rows
    assert (eighth.label, eighth.advised) == ("a100 size=eighth (0.125 GPU)", None)
    assert eighth.peak_p50_of_budget == eighth.peak_p95_of_budget == 0.5
    assert (half.sessions, half.gpu_hours_allocated, half.gpu_hours_busy, half.oom_rate) == (10, 5.0, 1.0, 0.1)
    assert half.peak_p50_of_budget == pytest.approx(0.151)
    assert half.peak_p95_of_budget == pytest.approx(0.601)
    # 60.1 % of 40 GiB = 24 GiB, x 1.2 = 28.9 GiB > 10 GiB: the advice keeps 1/2, as a user's would.
    assert (half.advised, half.advised_fits_share) == (None, None)
    assert report.advice == []
    # All ten at 15 %: 6 GiB x 1.2 = 7.2 GiB fits 1/8.
    report = build_report([HALF, EIGHTH], {("a100", "size=half"): {150: 10}})
    half = report.rows[1]
    assert (half.advised, half.advised_larger, half.advised_fits_share) == ("a100 size=eighth", False, 1.0)
    assert report.advice == [ADVISED_EIGHTH]


def test_grouped_rows_fold_into_totals_and_histograms() -> None:
    # (profile, choice, peak per mille, sessions, GPU-h allocated, GPU-h busy, OOM sessions, fraction, budget)
    groups = [
        ("a100", "size=half", 150, 7, 3.5, 0.5, 0, 0, 0.5, 40 * GIB),
        ("a100", "size=half", 600, 3, 1.5, 0.5, 1, 2, 0.5, 40 * GIB),
        ("a100", "size=half", None, 2, 1.0, None, 0, 0, 0.5, 40 * GIB),  # peaks never known
        (None, None, None, 1, None, None, 0, 0, None, None),  # a server outside any profile
    ]
    totals, histograms = fold_groups(groups)
    assert totals == [
        ChoiceTotals("a100", "size=half", 0.5, 40 * GIB, 12, 6.0, 1.0, 1, 2),
        ChoiceTotals("", "", 0.0, None, 1, 0.0, 0.0, 0, 0),
    ]
    assert histograms == {("a100", "size=half"): {150: 7, 600: 3}}


def test_rows_of_the_same_peak_from_two_sources_add_up() -> None:
    # A mid-day window: its first day from the session table, later days from the rollup.
    groups = [
        ("a100", "size=half", 150, 2, 1.0, 0.5, 0, 1, 0.5, 40 * GIB),
        ("a100", "size=half", 150, 5, 2.5, 0.5, 1, 1, 0.5, 40 * GIB),
    ]
    totals, histograms = fold_groups(groups)
    assert totals == [ChoiceTotals("a100", "size=half", 0.5, 40 * GIB, 7, 3.5, 1.0, 1, 2)]
    assert histograms == {("a100", "size=half"): {150: 7}}


def test_no_advice_when_the_sessions_need_their_size() -> None:
    report = build_report([HALF, EIGHTH], {("a100", "size=half"): {150: 4, 600: 6}})
    assert report.advice == []
    assert report.rows[1].advised is None
    assert "What users are advised: nothing" in as_text(report)


def test_outputs_carry_the_same_rows() -> None:
    report = build_report([HALF, EIGHTH], {("a100", "size=half"): {150: 10}})
    assert problems(HISTORY_REPORT, json.loads(as_json(report))) == []
    assert [r["choice"] for r in json.loads(as_json(report))["choices"]] == ["size=eighth", "size=half"]
    rows = list(csv.DictReader(io.StringIO(as_csv(report))))
    assert [(r["choice"], r["sessions"], r["advised"], r["advised_fits_share"]) for r in rows] == [
        ("size=eighth", "4", "", ""), ("size=half", "10", "a100 size=eighth", "1.0")
    ]  # fmt: skip
    text = as_text(report)
    assert "a100 size=half (0.5 GPU)" in text
    assert "a100 size=eighth (fits 100 %)" in text
    assert f"- {ADVISED_EIGHTH}" in text


def seed(history) -> None:
    start = datetime(2026, 11, 1)
    rows = [row("ann", n, start + timedelta(hours=n), peak_bytes=int(6.4 * GIB)) for n in range(7)]
    rows += [row("bob", 100, start, peak_bytes=24 * GIB)]
    rows += [row("bob", 101, start, peak_bytes=40 * GIB, oom_events=1, oom_errors=1, seconds_above_95=30.0)]
    rows += [row("bob", 102, start, peak_bytes=39 * GIB, seconds_above_95=60.0)]
    rows += [row("ann", 200 + n, start, choice="size=eighth", fraction=0.125, budget_bytes=10 * GIB,
                 peak_bytes=5 * GIB, busy_share=None) for n in range(4)]  # fmt: skip
    store.insert_many(history, rows)


def test_the_databases_give_the_same_report(history) -> None:
    seed(history)
    report = load_report(history)
    eighth, half = report.rows
    # One of bob's three big sessions had an out-of-memory error; two reached the budget (one only by time).
    assert (half.sessions, half.oom_rate, half.reached_budget_rate) == (10, 0.1, 0.2)
    assert half.gpu_hours_allocated == pytest.approx(5.0)
    assert half.gpu_hours_busy == pytest.approx(1.25)
    assert half.peak_p50_of_budget == pytest.approx(0.160)  # just under 6.4 / 40 = 16 %: bucket 159, edge 160
    assert half.peak_p95_of_budget == pytest.approx(1.001)  # bob's session that ran out, at 40 of 40 GiB
    assert (eighth.sessions, eighth.gpu_hours_busy, eighth.peak_p95_of_budget) == (4, 0.0, pytest.approx(0.501))
    assert half.advised is None  # 2 of 10 reached the budget: a step up, and there is none bigger
    assert report.advice == []
    assert load_report(history, since=datetime(2026, 11, 1, 3)).rows[0].sessions == 4  # ann's last 4 half sessions


def test_the_command_prints_text_json_and_csv(history, db_url, capsys) -> None:
    seed(history)
    assert main(["--db-url", db_url]) == 0
    assert "What users are advised:" in capsys.readouterr().out
    assert main(["--db-url", db_url, "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["choices"]) == 2
    assert main(["--db-url", db_url, "--format", "csv"]) == 0
    assert capsys.readouterr().out.startswith("profile,choice,")


def test_the_command_reads_the_url_from_the_hub_config(history, db_url, tmp_path, capsys) -> None:
    seed(history)
    config = tmp_path / "jupyterhub_config.py"
    config.write_text(f"c.FracnbService.db_url = {db_url!r}\n")
    assert main(["--config", str(config), "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["choices"]) == 2


def test_the_command_says_what_is_wrong_with_a_bad_url(capsys) -> None:
    assert main(["--db-url", "nosuchdialect://x"]) == 1
    assert "cannot open the session history database" in capsys.readouterr().err
