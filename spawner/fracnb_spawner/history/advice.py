"""Right-sizing advice from a user's own past sessions (pure: literal inputs, no I/O).

"Your last 6 sessions on 1/2 GPU peaked at 6.1 GiB or less. 1/8 GPU (10 GiB) would have fit: it's free now."

The advice looks at the user's most recent sessions on the choice they used last (or on a given
one: the choice of the server that asks, for its advice for next time). With fewer than
``min_sessions`` of them that have a known peak, there is no advice. The rule itself is
:func:`suggestion`, which the admins' report (:mod:`.report`) applies to every session of a choice:
if at least one session in 20 reached the budget (memory at 95 % of it, or out of memory), the next
size up; otherwise the smallest offered choice whose memory covers the 95th-percentile peak plus
``headroom`` (among MIG choices, the smallest MIG profile that does). Nothing when that is the
choice already used. A user's window is 20 sessions, so for them one that reached the budget is enough.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from fracnb_spawner.common.units import format_bytes

DEFAULT_HEADROOM = 0.20
DEFAULT_MIN_SESSIONS = 3
DEFAULT_WINDOW = 20
PEAK_SHARE = 0.95  # the peak that a choice must cover: the 95th percentile of the sessions' peaks


@dataclass(frozen=True)
class PastSession:
    """One of the user's sessions, newest first in the lists given to :func:`advise`."""

    choice: Hashable  # what identifies the choice on the form: (profile, option, choice) keys
    budget_bytes: int | None
    peak_bytes: int | None
    oom_events: int = 0
    seconds_above_95: float = 0.0

    @property
    def hit_budget(self) -> bool:
        """It reached its budget: memory at 95 % of it for a while, or at the budget (out of memory)."""
        return self.oom_events > 0 or self.seconds_above_95 > 0


@dataclass(frozen=True)
class Offer:
    """A choice the form offers now."""

    choice: Hashable
    label: str  # as the form shows it: "1/8 GPU"
    memory_bytes: int
    mig: bool = False
    free: bool | None = None  # None: availability unknown


@dataclass(frozen=True)
class Advice:
    text: str
    suggested: Hashable
    larger: bool  # the suggestion is a step up (the budget was hit), not a smaller fit
    sessions: int
    p95_bytes: int


def percentile(values: Sequence[int], share: float) -> int:
    """Nearest-rank percentile: the smallest value with at least ``share`` of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(math.ceil(share * len(ordered)) - 1, 0)]


def _free_text(offer: Offer) -> str:
    if offer.free is None:
        return ""
    return ": it's free now" if offer.free else " (none is free right now)"


def peak_words(p95: int, *, one: bool = False) -> str:
    """ "peaked at 6.1 GiB or less", "used no GPU memory": what the sessions at or below the 95th-percentile
    peak did (``one``: a single session), without the word percentile."""
    if p95 == 0:
        return "used no GPU memory"
    return f"peaked at {format_bytes(p95)}" + ("" if one else " or less")


def _peak_text(peaks: Sequence[int], p95: int, label: str) -> str:
    """The 95th-percentile peak in plain words: how many of the sessions stayed at or below it."""
    within = sum(peak <= p95 for peak in peaks)
    if len(peaks) == 1:
        return f"Your last session on {label} {peak_words(p95, one=True)}."
    who = f"Your last {len(peaks)} sessions" if within == len(peaks) else f"{within} of your last {len(peaks)} sessions"
    return f"{who} on {label} {peak_words(p95)}."


def _next_size_up(current: Offer, offers: Sequence[Offer]) -> Offer | None:
    bigger = [o for o in offers if o.memory_bytes > current.memory_bytes and (o.mig == current.mig or not current.mig)]
    return min(bigger, key=lambda o: (o.mig != current.mig, o.memory_bytes), default=None)


def _smallest_fit(current: Offer, offers: Sequence[Offer], needed: float) -> Offer | None:
    fitting = [o for o in offers if o.memory_bytes >= needed]
    if current.mig:  # among MIG choices: the smallest MIG profile that covers the need
        fitting = [o for o in fitting if o.mig] or fitting
    return min(fitting, key=lambda o: (o.memory_bytes, o.label), default=None)


@dataclass(frozen=True)
class Suggestion:
    offer: Offer
    larger: bool  # a step up: the budget was reached


def suggestion(
    current: Offer, offers: Sequence[Offer], *, p95_bytes: int, reached: int, sessions: int, headroom: float
) -> Suggestion | None:
    """The one rule of the advice and the admins' report, for ``sessions`` on ``current``: ``reached``
    of them reached the budget, and 95 % peaked at ``p95_bytes`` or less. The next size up when at
    least one session in 20 reached the budget; else the smallest choice that fits the peak with
    ``headroom``; None when that is ``current`` (or nothing fits better)."""
    if reached > 0 and reached >= (1 - PEAK_SHARE) * sessions:
        bigger = _next_size_up(current, offers)
        return None if bigger is None else Suggestion(bigger, larger=True)
    smaller = _smallest_fit(current, offers, p95_bytes * (1 + headroom))
    if smaller is None or smaller.memory_bytes >= current.memory_bytes:
        return None
    return Suggestion(smaller, larger=False)


def sessions_on(history: Sequence[PastSession], choice: Hashable, window: int = DEFAULT_WINDOW) -> list[PastSession]:
    """The sessions among the newest ``window`` that ran ``choice`` and have a known peak."""
    return [s for s in history[:window] if s.choice == choice and s.peak_bytes is not None]


def waiting_text(count: int, min_sessions: int = DEFAULT_MIN_SESSIONS) -> str | None:
    """ "No advice yet: 3 sessions needed (1 so far)." while there are too few sessions; else None."""
    if count >= min_sessions:
        return None
    return f"No advice yet: {min_sessions} sessions needed ({count} so far)."


def advise(
    history: Sequence[PastSession],
    offers: Sequence[Offer],
    *,
    current: Hashable | None = None,
    headroom: float = DEFAULT_HEADROOM,
    min_sessions: int = DEFAULT_MIN_SESSIONS,
    window: int = DEFAULT_WINDOW,
) -> Advice | None:
    """Advice for the next spawn from ``history`` (newest first), or None when there is none to give.

    ``current``: the choice to advise on; None for the choice of the newest session.
    """
    by_choice = {offer.choice: offer for offer in offers}
    if current is None:
        current = history[0].choice if history else None
    if current not in by_choice:
        return None
    current = by_choice[current]
    recent = sessions_on(history, current.choice, window)
    if len(recent) < min_sessions:
        return None
    peaks = [s.peak_bytes for s in recent if s.peak_bytes is not None]
    p95 = percentile(peaks, PEAK_SHARE)
    hits = sum(s.hit_budget for s in recent)
    found = suggestion(current, offers, p95_bytes=p95, reached=hits, sessions=len(recent), headroom=headroom)
    if found is None:
        return None
    opening, offer = _peak_text(peaks, p95, current.label), found.offer
    if found.larger:
        text = (
            f"{opening} {hits} of them reached the budget of {format_bytes(current.memory_bytes)}. "
            f"{offer.label} ({format_bytes(offer.memory_bytes)}) gives more room{_free_text(offer)}."
        )
    else:
        text = f"{opening} {offer.label} ({format_bytes(offer.memory_bytes)}) would have fit{_free_text(offer)}."
    return Advice(text, offer.choice, found.larger, len(recent), p95)
