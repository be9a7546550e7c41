"""Quotas in plain words: the spawn form's quota line and the refusal of a request over quota. Pure."""

from __future__ import annotations

from fractions import Fraction

from fracnb_spawner.common.logsafe import escape_controls
from fracnb_spawner.common.units import gpus_text
from fracnb_spawner.quota.policy import QuotaDecision, use_against


def quota_line(decision: QuotaDecision) -> str | None:
    """ "Your GPU quota: 0 of 0.5 GPU in use · team-a (your team, together): 0.25 of 2 GPUs in use".

    ``decision`` is :func:`.quota.check_request` for a request of 0 GPUs (what is in use now).
    None when no limit applies to the user.
    """
    parts = []
    if decision.user_limit is not None:
        parts.append(f"Your GPU quota: {_use(decision.user_used, decision.user_limit, decision.user_waiting)}")
    for group in decision.groups:
        parts.append(
            f"{escape_controls(group.name)} (your team, together): {_use(group.used, group.limit, group.waiting)}"
        )
    return " · ".join(parts) or None


def _use(used: Fraction, limit: Fraction, waiting: Fraction = Fraction(0)) -> str:
    """ "0.25 of 0.5 GPU in use"; with queued servers "0.25 GPU + 0.25 GPU (waiting) of 0.5 GPU in use"."""
    return f"{use_against(used, limit, waiting)} in use"


def headroom(decision: QuotaDecision) -> Fraction | None:
    """The largest share that still fits every limit of the user (None: no limit)."""
    rooms = [group.limit - group.used for group in decision.groups]
    if decision.user_limit is not None:
        rooms.append(decision.user_limit - decision.user_used)
    return max(min(rooms), Fraction(0)) if rooms else None


def quota_refusal(decision: QuotaDecision) -> str:
    """The refusal of a request over quota: what is in use, and what the user can do about it."""
    room = headroom(decision)
    smaller = f"Choose a share of at most {gpus_text(room)}, or " if room else ""
    own_limit = decision.user_limit is not None and decision.user_used + decision.requested > decision.user_limit
    if own_limit:
        advice = f"{smaller}stop one of your other servers first."
    else:
        group = escape_controls(next(g for g in decision.groups if g.used + decision.requested > g.limit).name)
        wait = "wait" if smaller else "Wait"
        advice = f"{smaller}{wait} until a server of {group} stops, or ask a teammate in {group} to stop one."
    return f"Over GPU quota: {decision.message}. {advice}"
