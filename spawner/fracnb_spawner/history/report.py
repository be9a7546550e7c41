"""The admins' report: per profile and choice, how sessions used what they were given.

One aggregate query does the heavy work in the database: sums per (profile, choice, peak in
thousandths of the budget), read from the per-day rollup (rollup.py) rather than from every
session. A ``since`` that is not a midnight reads its first, partial day from the session table
(along its start-time index) and the whole days after it from the rollup, so the window is
exact. Everything else is pure arithmetic on those rows (:func:`fold_groups`,
:func:`build_report`), tested against literal data:

- sessions; GPU-hours allocated (fraction x observed hours) and busy (x busy share);
- the peak's p50 and p95 against the budget (from the histogram: exact to 0.1 % of the budget);
- the OOM rate (sessions with an out-of-memory event);
- the share of sessions that would have fit the largest smaller choice of the same profile
  (peak plus headroom within its budget);
- a suggested menu line where most sessions of a choice fit a smaller one:
  "70 % of a100 size=half (0.5 GPU) sessions peaked under 8.3 GiB: offer size=eighth (10 GiB)".
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, time, timedelta
from fractions import Fraction
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session, sessionmaker

from fracnb_spawner.common.units import format_bytes, share_words
from fracnb_spawner.history.models import SessionDay, SessionRecord
from fracnb_spawner.history.rollup import UNKNOWN_PEAK

PER_MILLE = 1000
DEFAULT_HEADROOM = 0.20
DEFAULT_MENU_SHARE = 0.5


@dataclass(frozen=True)
class ChoiceTotals:
    """One row of the totals query."""

    profile: str
    choice: str
    fraction: float
    budget_bytes: int | None
    sessions: int
    allocated_gpu_hours: float
    busy_gpu_hours: float
    oom_sessions: int


@dataclass
class ChoiceRow:
    profile: str
    choice: str
    fraction: float
    budget_bytes: int | None
    sessions: int
    gpu_hours_allocated: float
    gpu_hours_busy: float
    peak_p50_of_budget: float | None
    peak_p95_of_budget: float | None
    oom_rate: float
    smaller_choice: str | None
    fits_smaller_share: float | None

    @property
    def label(self) -> str:
        share = share_words(Fraction(self.fraction).limit_denominator(1000))
        return f"{self.profile} {self.choice} ({share})".replace("  ", " ")


@dataclass
class Report:
    rows: list[ChoiceRow] = field(default_factory=list)
    menu: list[str] = field(default_factory=list)
    headroom: float = DEFAULT_HEADROOM


def _histogram_percentile(histogram: Mapping[int, int], share: float) -> float | None:
    """The ratio (peak / budget) below which ``share`` of the sessions lie, from per-mille buckets."""
    total = sum(histogram.values())
    if not total:
        return None
    wanted, seen = share * total, 0
    for bucket in sorted(histogram):
        seen += histogram[bucket]
        if seen >= wanted:
            return (bucket + 1) / PER_MILLE
    return (max(histogram) + 1) / PER_MILLE


def _share_fitting(histogram: Mapping[int, int], budget: int, smaller: int, headroom: float) -> float | None:
    """Share of sessions whose peak (bucket's upper edge) plus headroom fits in ``smaller`` bytes."""
    total = sum(histogram.values())
    if not total:
        return None
    fitting = sum(n for bucket, n in histogram.items() if (bucket + 1) / PER_MILLE * budget * (1 + headroom) <= smaller)
    return fitting / total


def _smaller(totals: ChoiceTotals, everything: Sequence[ChoiceTotals]) -> list[ChoiceTotals]:
    """Choices of the same profile with a smaller budget, smallest first."""
    if not totals.budget_bytes:
        return []
    found = [
        other
        for other in everything
        if other.profile == totals.profile and other.budget_bytes and other.budget_bytes < totals.budget_bytes
    ]
    return sorted(found, key=lambda other: other.budget_bytes or 0)


def _menu_line(
    row: ChoiceRow, histogram: Mapping[int, int], smaller: list[ChoiceTotals], *, headroom: float, menu_share: float
) -> str | None:
    for candidate in smaller:  # the smallest choice most sessions fit
        budget = row.budget_bytes or 0
        share = _share_fitting(histogram, budget, candidate.budget_bytes or 0, headroom)
        if share is not None and share >= menu_share:
            under = format_bytes(int((candidate.budget_bytes or 0) / (1 + headroom)))
            return (
                f"{round(share * 100)} % of {row.label} sessions peaked under {under}: "
                f"offer {candidate.choice} ({format_bytes(candidate.budget_bytes or 0)})"
            )
    return None


def build_report(
    totals: Sequence[ChoiceTotals],
    histograms: Mapping[tuple[str, str], Mapping[int, int]],
    *,
    headroom: float = DEFAULT_HEADROOM,
    menu_share: float = DEFAULT_MENU_SHARE,
) -> Report:
    """The report from the two queries' rows; rows sorted by profile, then budget."""
    report = Report(headroom=headroom)
    for item in sorted(totals, key=lambda t: (t.profile, t.budget_bytes or 0, t.choice)):
        histogram = histograms.get((item.profile, item.choice), {})
        smaller = _smaller(item, totals)
        largest_smaller = smaller[-1] if smaller else None
        fits = None
        if largest_smaller is not None and item.budget_bytes:
            fits = _share_fitting(histogram, item.budget_bytes, largest_smaller.budget_bytes or 0, headroom)
        row = ChoiceRow(
            profile=item.profile,
            choice=item.choice,
            fraction=item.fraction,
            budget_bytes=item.budget_bytes,
            sessions=item.sessions,
            gpu_hours_allocated=item.allocated_gpu_hours,
            gpu_hours_busy=item.busy_gpu_hours,
            peak_p50_of_budget=_histogram_percentile(histogram, 0.50),
            peak_p95_of_budget=_histogram_percentile(histogram, 0.95),
            oom_rate=item.oom_sessions / item.sessions if item.sessions else 0.0,
            smaller_choice=None if largest_smaller is None else largest_smaller.choice,
            fits_smaller_share=fits,
        )
        report.rows.append(row)
        line = _menu_line(row, histogram, smaller, headroom=headroom, menu_share=menu_share)
        if line:
            report.menu.append(line)
    return report


# ---- the queries ----------------------------------------------------------------------------------


def query_session_groups(session: Session, since: datetime, until: datetime) -> list[tuple[Any, ...]]:
    """One aggregate row per (profile, choice, peak in per mille of the budget) of the sessions that
    started in [since, until), read from the session table."""
    hours = SessionRecord.fraction * SessionRecord.observed_seconds / 3600.0
    query = (
        select(
            SessionRecord.profile,
            SessionRecord.choice,
            SessionRecord.peak_per_mille,
            func.count(),
            func.sum(hours),
            func.sum(hours * SessionRecord.busy_share),
            func.sum(case((SessionRecord.oom_events > 0, 1), else_=0)),
            func.max(SessionRecord.fraction),
            func.max(SessionRecord.budget_bytes),
        )
        .where(SessionRecord.started_at >= since, SessionRecord.started_at < until)
        .group_by(SessionRecord.profile, SessionRecord.choice, SessionRecord.peak_per_mille)
    )
    return [tuple(row) for row in session.execute(query)]


def query_day_groups(session: Session, first_day: datetime | None = None) -> list[tuple[Any, ...]]:
    """The same rows as :func:`query_session_groups`, from the rollup's days from ``first_day`` on
    (all when None); the rollup's sentinels for unknown values become None again."""
    query = (
        select(
            SessionDay.profile,
            SessionDay.choice,
            SessionDay.peak_per_mille,
            func.sum(SessionDay.sessions),
            func.sum(SessionDay.gpu_hours_allocated),
            func.sum(SessionDay.gpu_hours_busy),
            func.sum(SessionDay.oom_sessions),
            func.max(SessionDay.fraction),
            func.max(SessionDay.budget_bytes),
        )
        .where(*([] if first_day is None else [SessionDay.day >= first_day.date()]))
        .group_by(SessionDay.profile, SessionDay.choice, SessionDay.peak_per_mille)
        .having(func.sum(SessionDay.sessions) > 0)
    )
    return [
        (profile, choice, None if peak == UNKNOWN_PEAK else peak, count, allocated, busy, oom, fraction or None,
         budget or None)
        for profile, choice, peak, count, allocated, busy, oom, fraction, budget in session.execute(query)
    ]  # fmt: skip


def query_groups(session: Session, since: datetime | None = None) -> list[tuple[Any, ...]]:
    """The report's grouped rows for the sessions started at or after ``since`` (naive UTC; None: all)."""
    if since is None:
        return query_day_groups(session)
    midnight = datetime.combine(since.date(), time())
    if since == midnight:
        return query_day_groups(session, since)
    next_midnight = midnight + timedelta(days=1)
    return query_session_groups(session, since, next_midnight) + query_day_groups(session, next_midnight)


def fold_groups(groups: Iterable[Sequence[Any]]) -> tuple[list[ChoiceTotals], dict[tuple[str, str], dict[int, int]]]:
    """Totals per choice and its histogram of peaks, from :func:`query_groups`'s rows (a choice and peak
    may come in more than one row: their counts add up)."""
    sums: dict[tuple[str, str], list[Any]] = {}
    histograms: dict[tuple[str, str], dict[int, int]] = {}
    for profile, choice, bucket, count, allocated, busy, oom_sessions, fraction, budget in groups:
        key = (profile or "", choice or "")
        total = sums.setdefault(key, [0.0, None, 0, 0.0, 0.0, 0])
        total[0] = max(total[0], float(fraction or 0))
        total[1] = budget if total[1] is None else max(total[1], budget or 0)
        total[2] += int(count)
        total[3] += float(allocated or 0)
        total[4] += float(busy or 0)
        total[5] += int(oom_sessions or 0)
        if bucket is not None:
            histogram = histograms.setdefault(key, {})
            histogram[int(bucket)] = histogram.get(int(bucket), 0) + int(count)
    totals = [
        ChoiceTotals(profile, choice, f, None if b is None else int(b), n, a, u, o)
        for (profile, choice), (f, b, n, a, u, o) in sums.items()
    ]
    return totals, histograms


def load_report(db: sessionmaker[Session], *, since: datetime | None = None, headroom: float = DEFAULT_HEADROOM,
                menu_share: float = DEFAULT_MENU_SHARE) -> Report:  # fmt: skip
    with db() as session:
        groups = query_groups(session, since)
    totals, histograms = fold_groups(groups)
    return build_report(totals, histograms, headroom=headroom, menu_share=menu_share)


# ---- output ---------------------------------------------------------------------------------------

COLUMNS = (
    "profile",
    "choice",
    "fraction",
    "budget_bytes",
    "sessions",
    "gpu_hours_allocated",
    "gpu_hours_busy",
    "peak_p50_of_budget",
    "peak_p95_of_budget",
    "oom_rate",
    "smaller_choice",
    "fits_smaller_share",
)


def as_json(report: Report) -> str:
    return json.dumps({"headroom": report.headroom, "choices": [asdict(r) for r in report.rows], "menu": report.menu})


def as_csv(report: Report) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in report.rows:
        writer.writerow(["" if getattr(row, c) is None else getattr(row, c) for c in COLUMNS])
    return out.getvalue()


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f} %"


def text_lines(report: Report) -> Iterable[str]:
    header = ("Choice", "Sessions", "GPU-h alloc", "GPU-h busy", "Peak p50", "Peak p95", "OOM", "Fit smaller")
    table = [header]
    for row in report.rows:
        fit = "—" if row.fits_smaller_share is None else f"{_percent(row.fits_smaller_share)} ({row.smaller_choice})"
        table.append(
            (
                row.label,
                str(row.sessions),
                f"{row.gpu_hours_allocated:.1f}",
                f"{row.gpu_hours_busy:.1f}",
                _percent(row.peak_p50_of_budget),
                _percent(row.peak_p95_of_budget),
                _percent(row.oom_rate),
                fit,
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        yield "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
    yield ""
    yield "Peaks are against each choice's memory budget; fitting a smaller choice allows " + (
        f"{report.headroom * 100:.0f} % headroom."
    )
    if report.menu:
        yield "Suggested profile menu:"
        yield from (f"- {line}" for line in report.menu)
    else:
        yield "Suggested profile menu: no change (no choice's sessions mostly fit a smaller one)."


def as_text(report: Report) -> str:
    return "\n".join(text_lines(report)) + "\n"
