"""The GPU queue's rules, pure: what a slot kind is, who goes first, and what a queued pod carries.

A GPU spawn that finds no free slot waits with its pod gated (``spec.schedulingGates``); the hub
lifts the gate in the order :func:`queue_order` gives. Everything the order needs is on the pod
(annotations), so a restarted hub rebuilds the same queue from the cluster (docs/queue.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from typing import Any

from fracnb_spawner.common.podkeys import MAX_WAIT_ANNOTATION, PRIORITY_ANNOTATION, QUEUED_AT_ANNOTATION
from fracnb_spawner.quota.policy import Allocation, QuotaPolicy, used_by

# ---- order -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Waiting:
    """One queued spawn as the order sees it."""

    key: str  # "namespace/pod", the tie-breaker that makes the order total
    priority: int
    share: Fraction  # of the quota the user's most loaded group (or the user) holds now; 0 without quotas
    queued_at: datetime


def queue_order(waiting: Iterable[Waiting]) -> list[Waiting]:
    """Higher priority first; within a priority, the smaller share of quota in use; then first come."""
    return sorted(waiting, key=lambda w: (-w.priority, w.share, w.queued_at, w.key))


def quota_share(
    policy: QuotaPolicy, allocations: Iterable[Allocation], *, user: str, groups: Mapping[str, Iterable[str]]
) -> Fraction:
    """The largest share of a quota the user's spawn would draw on: each of their groups with a quota,
    and their own quota; 0 when none limits them (they then go before those who hold some)."""
    allocations = list(allocations)
    shares = []
    for name, members in groups.items():
        limit = policy.groups.get(name)
        if limit:
            shares.append(used_by(allocations, list(members)) / limit)
    own = policy.user_limit(user)
    if own:
        shares.append(used_by(allocations, [user]) / own)
    return max(shares, default=Fraction(0))


def user_priority(
    user: str, groups: Iterable[str], *, users: Mapping[str, int], groups_priority: Mapping[str, int], default: int
) -> int:
    """The user's own priority when configured, else the highest of their groups', else ``default``."""
    if user in users:
        return users[user]
    return max((groups_priority[g] for g in groups if g in groups_priority), default=default)


# ---- what a queued pod carries -------------------------------------------------------------------


def format_time(moment: datetime) -> str:
    """RFC 3339 UTC with ``Z`` and microseconds: ``2026-11-23T14:05:00.123456Z``."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def queue_annotations(queued_at: datetime, priority: int, max_wait: float) -> dict[str, str]:
    return {
        QUEUED_AT_ANNOTATION: format_time(queued_at),
        PRIORITY_ANNOTATION: str(priority),
        MAX_WAIT_ANNOTATION: f"{max_wait:g}",
    }


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def waiting_from_pod(pod: Mapping[str, Any], share: Fraction) -> Waiting | None:
    """A gated pod's place in the queue from its annotations; None if it has no readable enqueue time."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    queued_at = parse_time(annotations.get(QUEUED_AT_ANNOTATION))
    if queued_at is None:
        return None
    key = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
    return Waiting(key, _int(annotations.get(PRIORITY_ANNOTATION), 0), share, queued_at)


def wait_deadline(pod: Mapping[str, Any]) -> datetime | None:
    """When a queued pod's maximum wait ends, from its annotations."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    queued_at = parse_time(annotations.get(QUEUED_AT_ANNOTATION))
    try:
        seconds = float(annotations.get(MAX_WAIT_ANNOTATION, ""))
    except ValueError:
        return None
    if queued_at is None:
        return None
    return queued_at + timedelta(seconds=seconds)


def ordinal(number: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"
