"""The admins' report: per profile and choice, how sessions used what they were given, and what the
users of each choice are advised.

One aggregate query does the heavy work in the database: sums per (profile, choice, peak in
thousandths of the budget), read from the per-day rollup (rollup.py) rather than from every
session. A ``since`` that is not a midnight reads its first, partial day from the session table
(along its start-time index) and the whole days after it from the rollup, so the window is
exact. Everything else is pure arithmetic on those rows (:func:`fold_groups`,
:func:`build_report`), tested against literal data:

- sessions; GPU-hours allocated (fraction x observed hours) and busy (x busy share);
- the peak's p50 and p95 against the budget (from the histogram: exact to 0.1 % of the budget);
- the OOM rate: sessions with an out-of-memory error; and, apart from it, the sessions that reached
  their budget (memory at 95 % of it, or at the budget);
- the advice: the right-sizing rule the spawn form and the notebook give each user
  (:func:`.advice.suggestion`), applied to all the sessions of the choice, over the choices the hub
  offers (its profile list, across profiles; without it, the choices in the data), e.g.
  "0.25 GPU: 95 % of 6 sessions used no GPU memory; users are advised Small GPU memory (10 GiB)".
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, time, timedelta
from fractions import Fraction
from typing import Any

from sqlalchemy import case, func, or_, select
from sqlalchemy.orm import Session, sessionmaker

from fracnb_spawner.common.units import format_bytes, share_words
from fracnb_spawner.history.advice import (
    DEFAULT_HEADROOM,
    DEFAULT_MIN_SESSIONS,
    PEAK_SHARE,
    Offer,
    peak_words,
    suggestion,
)
from fracnb_spawner.history.models import SessionDay, SessionRecord
from fracnb_spawner.history.rollup import UNKNOWN_PEAK

PER_MILLE = 1000
_NAMES_A_SHARE = re.compile(r"\d\s*GPUs?\b")


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
    oom_sessions: int  # with an out-of-memory error
    reached_sessions: int = 0  # that reached their budget


@dataclass
class ChoiceRow:
    profile: str
    choice: str
    label: str  # as users see the choice: its display name and share
    fraction: float
    budget_bytes: int | None
    sessions: int
    gpu_hours_allocated: float
    gpu_hours_busy: float
    peak_p50_of_budget: float | None
    peak_p95_of_budget: float | None
    oom_rate: float
    reached_budget_rate: float
    advised: str | None  # the choice its users are advised instead, as they see it
    advised_larger: bool | None  # a step up (the budget was reached), not a smaller fit
    advised_fits_share: float | None  # of a smaller advised choice: sessions whose peak plus headroom fit it


@dataclass
class Report:
    rows: list[ChoiceRow] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    headroom: float = DEFAULT_HEADROOM
    min_sessions: int = DEFAULT_MIN_SESSIONS  # a choice's sessions (of all users) before it is advised on


@dataclass(frozen=True)
class ReportMenu:
    """The choices users are offered (the spawn form's, as the advice reads them), and where a stored
    (profile, choice) is among them."""

    offers: Sequence[Offer]
    locate: Callable[[str, str], Hashable | None]
    headroom: float = DEFAULT_HEADROOM
    # As each user's advice (c.FractionalSpawner.right_sizing_min_sessions): no advice on fewer sessions.
    min_sessions: int = DEFAULT_MIN_SESSIONS


def menu_of_totals(totals: Sequence[ChoiceTotals], headroom: float = DEFAULT_HEADROOM) -> ReportMenu:
    """Without the hub's profile list: the choices in the data, by their budgets."""
    offers = [
        Offer((t.profile, t.choice), _plain_label(t.profile, t.choice), t.budget_bytes)
        for t in totals
        if t.budget_bytes
    ]
    known = {offer.choice for offer in offers}

    def locate(profile: str, choice: str) -> Hashable | None:
        return (profile, choice) if (profile, choice) in known else None

    return ReportMenu(offers, locate, headroom)


def _plain_label(profile: str, choice: str) -> str:
    return f"{profile} {choice}".strip() or "(no profile)"


def _with_share(label: str, fraction: float) -> str:
    """The label with the share, unless it names one already ("1/2 GPU", "0.25 GPU")."""
    if _NAMES_A_SHARE.search(label):
        return label
    return f"{label} ({share_words(Fraction(fraction).limit_denominator(1000))})"


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


def _share_fitting(histogram: Mapping[int, int], budget: int, target: int, headroom: float) -> float | None:
    """Share of sessions whose peak (bucket's upper edge) plus headroom fits in ``target`` bytes."""
    total = sum(histogram.values())
    if not total:
        return None
    fitting = sum(n for bucket, n in histogram.items() if (bucket + 1) / PER_MILLE * budget * (1 + headroom) <= target)
    return fitting / total


def _p95_bytes(histogram: Mapping[int, int], budget: int) -> int | None:
    """The 95th-percentile peak in bytes: the upper edge of its 0.1 % bucket, so never below the peaks."""
    ratio = _histogram_percentile(histogram, PEAK_SHARE)
    return None if ratio is None else int(ratio * budget)


def _advice_line(row: ChoiceRow, offer: Offer, p95: int, reached: int) -> str:
    if row.advised_larger:
        return (
            f"{row.label}: {reached} of {row.sessions} sessions reached the budget of "
            f"{format_bytes(row.budget_bytes or 0)}; users are advised {offer.label} "
            f"({format_bytes(offer.memory_bytes)}), which gives more room."
        )
    fits = "" if row.advised_fits_share is None else f", which {round(row.advised_fits_share * 100)} % of them fit"
    return (
        f"{row.label}: {round(PEAK_SHARE * 100)} % of {row.sessions} sessions {peak_words(p95)}; "
        f"users are advised {offer.label} ({format_bytes(offer.memory_bytes)}){fits}."
    )


def build_report(
    totals: Sequence[ChoiceTotals],
    histograms: Mapping[tuple[str, str], Mapping[int, int]],
    *,
    menu: ReportMenu | None = None,
    headroom: float | None = None,
) -> Report:
    """The report from the two queries' rows, advised over ``menu`` (default: the choices in the data);
    rows sorted by profile, then budget."""
    menu = menu or menu_of_totals(totals)
    headroom = menu.headroom if headroom is None else headroom
    offers = {offer.choice: offer for offer in menu.offers}
    report = Report(headroom=headroom, min_sessions=menu.min_sessions)
    for item in sorted(totals, key=lambda t: (t.profile, t.budget_bytes or 0, t.choice)):
        histogram = histograms.get((item.profile, item.choice), {})
        current = offers.get(menu.locate(item.profile, item.choice))
        label = _with_share(current.label if current else _plain_label(item.profile, item.choice), item.fraction)
        row = ChoiceRow(
            profile=item.profile,
            choice=item.choice,
            label=label,
            fraction=item.fraction,
            budget_bytes=item.budget_bytes,
            sessions=item.sessions,
            gpu_hours_allocated=item.allocated_gpu_hours,
            gpu_hours_busy=item.busy_gpu_hours,
            peak_p50_of_budget=_histogram_percentile(histogram, 0.50),
            peak_p95_of_budget=_histogram_percentile(histogram, PEAK_SHARE),
            oom_rate=item.oom_sessions / item.sessions if item.sessions else 0.0,
            reached_budget_rate=item.reached_sessions / item.sessions if item.sessions else 0.0,
            advised=None,
            advised_larger=None,
            advised_fits_share=None,
        )
        p95 = _p95_bytes(histogram, item.budget_bytes or 0)
        if current is not None and p95 is not None and sum(histogram.values()) >= menu.min_sessions:
            found = suggestion(
                current, menu.offers, p95_bytes=p95, reached=item.reached_sessions,
                sessions=sum(histogram.values()), headroom=headroom,
            )  # fmt: skip
            if found is not None:
                row.advised, row.advised_larger = found.offer.label, found.larger
                if not found.larger:
                    budget = item.budget_bytes or 0
                    row.advised_fits_share = _share_fitting(histogram, budget, found.offer.memory_bytes, headroom)
                report.advice.append(_advice_line(row, found.offer, p95, item.reached_sessions))
        report.rows.append(row)
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
            func.sum(case((SessionRecord.oom_errors > 0, 1), else_=0)),
            func.sum(case((or_(SessionRecord.oom_events > 0, SessionRecord.seconds_above_95 > 0), 1), else_=0)),
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
            func.sum(SessionDay.reached_sessions),
            func.max(SessionDay.fraction),
            func.max(SessionDay.budget_bytes),
        )
        .where(*([] if first_day is None else [SessionDay.day >= first_day.date()]))
        .group_by(SessionDay.profile, SessionDay.choice, SessionDay.peak_per_mille)
        .having(func.sum(SessionDay.sessions) > 0)
    )
    return [
        (profile, choice, None if peak == UNKNOWN_PEAK else peak, count, allocated, busy, oom, reached,
         fraction or None, budget or None)
        for profile, choice, peak, count, allocated, busy, oom, reached, fraction, budget in session.execute(query)
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
    for profile, choice, bucket, count, allocated, busy, oom_sessions, reached, fraction, budget in groups:
        key = (profile or "", choice or "")
        total = sums.setdefault(key, [0.0, None, 0, 0.0, 0.0, 0, 0])
        total[0] = max(total[0], float(fraction or 0))
        total[1] = budget if total[1] is None else max(total[1], budget or 0)
        total[2] += int(count)
        total[3] += float(allocated or 0)
        total[4] += float(busy or 0)
        total[5] += int(oom_sessions or 0)
        total[6] += int(reached or 0)
        if bucket is not None:
            histogram = histograms.setdefault(key, {})
            histogram[int(bucket)] = histogram.get(int(bucket), 0) + int(count)
    totals = [
        ChoiceTotals(profile, choice, f, None if b is None else int(b), n, a, u, o, r)
        for (profile, choice), (f, b, n, a, u, o, r) in sums.items()
    ]
    return totals, histograms


def load_report(
    db: sessionmaker[Session], *, since: datetime | None = None, menu: ReportMenu | None = None,
    headroom: float | None = None,
) -> Report:  # fmt: skip
    """The report of the sessions started since ``since`` (all when None), advised over ``menu``."""
    with db() as session:
        groups = query_groups(session, since)
    totals, histograms = fold_groups(groups)
    return build_report(totals, histograms, menu=menu, headroom=headroom)


# ---- output ---------------------------------------------------------------------------------------

COLUMNS = tuple(ChoiceRow.__dataclass_fields__)


def as_json(report: Report) -> str:
    rows = [asdict(r) for r in report.rows]
    return json.dumps({"headroom": report.headroom, "choices": rows, "advice": report.advice})


def as_csv(report: Report) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in report.rows:
        writer.writerow(["" if getattr(row, c) is None else getattr(row, c) for c in COLUMNS])
    return out.getvalue()


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f} %"


def advised_text(row: ChoiceRow) -> str:
    """ "Small GPU memory (fits 100 %)", "1/2 GPU (more room)", "—"."""
    if row.advised is None:
        return "—"
    if row.advised_larger:
        return f"{row.advised} (more room)"
    return row.advised + ("" if row.advised_fits_share is None else f" (fits {_percent(row.advised_fits_share)})")


def text_lines(report: Report) -> Iterable[str]:
    header = ("Choice", "Sessions", "GPU-h alloc", "GPU-h busy", "Peak p50", "Peak p95", "OOM", "Reached", "Advised")
    table = [header]
    for row in report.rows:
        table.append(
            (
                row.label,
                str(row.sessions),
                f"{row.gpu_hours_allocated:.1f}",
                f"{row.gpu_hours_busy:.1f}",
                _percent(row.peak_p50_of_budget),
                _percent(row.peak_p95_of_budget),
                _percent(row.oom_rate),
                _percent(row.reached_budget_rate),
                advised_text(row),
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        yield "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
    yield ""
    yield (
        "Peaks are against each choice's memory budget. OOM: sessions with an out-of-memory error; Reached: "
        "sessions whose memory reached 95 % of the budget or more."
    )
    yield (
        "Advised: what the spawn form and the notebook advise the users of each choice, by the same rule, here "
        f"over every user's sessions of the choice together: the smallest choice that fits 95 % of the peaks with "
        f"{report.headroom * 100:.0f} % headroom, or the next size up when one session in 20 reached the budget; "
        f"nothing before a choice has {report.min_sessions} sessions, as for each user."
    )
    if report.advice:
        yield "What users are advised:"
        yield from (f"- {line}" for line in report.advice)
    else:
        yield "What users are advised: nothing; every choice fits its sessions."


def as_text(report: Report) -> str:
    return "\n".join(text_lines(report)) + "\n"
