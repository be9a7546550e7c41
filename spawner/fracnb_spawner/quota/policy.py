"""GPU quotas: how many GPUs (exact fractions) a user and each of their groups may hold at once.

The arithmetic here is pure: allocations come in as a list (recounted from pods, see
:func:`allocations_from_pods`), decisions and reports go out as values. The spawner calls
:func:`check_request` under a lock at spawn time; the fracnb service calls
:func:`usage_report` for ``GET api/me``. Fractions add exactly (``1/8 + 1/8 == 1/4``), so
eight eighths always fit a quota of one GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from fracnb_spawner.common.logsafe import escape_controls
from fracnb_spawner.common.podkeys import (
    FRACTION_ANNOTATION,
    PROFILE_LABEL,
    SERVERNAME_ANNOTATION,
    USERNAME_ANNOTATION,
    is_waiting,
)
from fracnb_spawner.common.units import (
    QuantityError,
    format_fraction,
    format_gpus,
    gpus_text,
    held_words,
    parse_fraction,
    use_text,
)

TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})


class NegativeAmountError(QuantityError):
    """A quota or annotated amount below zero."""


def parse_gpus(value: object) -> Fraction:
    """Read a non-negative amount of GPUs: ``2``, ``0.5``, ``"0.5"``, ``"3/4"`` or a Fraction.

    The quantity rules are ``units.parse_fraction``'s; this adds only that an amount can't be
    negative. Raises ``QuantityError``.
    """
    amount = value if isinstance(value, Fraction) else parse_fraction(value)
    if amount < 0:
        raise NegativeAmountError(f"{value!r} is negative")
    return amount


@dataclass(frozen=True)
class QuotaPolicy:
    """Quotas in GPUs; ``None`` means unlimited."""

    default_user: Fraction | None = None
    users: Mapping[str, Fraction | None] = field(default_factory=dict)
    groups: Mapping[str, Fraction] = field(default_factory=dict)

    def user_limit(self, user: str) -> Fraction | None:
        return self.users.get(user, self.default_user)

    @property
    def has_limits(self) -> bool:
        return self.default_user is not None or bool(self.groups) or any(v is not None for v in self.users.values())


@dataclass(frozen=True)
class Allocation:
    """GPUs held by one server (running, starting or still being deleted)."""

    user: str
    server: str
    fraction: Fraction
    profile: str = ""
    waiting: bool = False  # its pod waits in the GPU queue: the share is reserved, not yet on a GPU


@dataclass(frozen=True)
class GroupUse:
    name: str
    used: Fraction
    limit: Fraction
    waiting: Fraction = Fraction(0)  # of ``used``, what servers waiting in the GPU queue reserve


@dataclass(frozen=True)
class QuotaDecision:
    """Whether a server may start with ``requested`` GPUs, and why not if it may not."""

    allowed: bool
    message: str
    requested: Fraction
    user_used: Fraction
    user_limit: Fraction | None
    groups: tuple[GroupUse, ...] = ()
    user_waiting: Fraction = Fraction(0)  # of ``user_used``, what the user's queued servers reserve


def _pod_fraction(annotations: Mapping[str, str]) -> Fraction | None:
    raw = annotations.get(FRACTION_ANNOTATION)
    if raw is None:
        return None
    try:
        return parse_gpus(raw)
    except QuantityError:
        # A hand-edited annotation must not hide a running server from the count; we
        # cannot know its size, so it is skipped rather than guessed.
        return None


def pod_profile(metadata: Mapping[str, Any]) -> str:
    """The profile slug of a pod: its annotation, or (pods of older versions) its label."""
    annotations = metadata.get("annotations") or {}
    return annotations.get(PROFILE_LABEL) or (metadata.get("labels") or {}).get(PROFILE_LABEL, "")


def allocations_from_pods(pods: Iterable[Mapping[str, Any]]) -> list[Allocation]:
    """Recount allocations from singleuser pods as the Kubernetes API returns them (dicts).

    Pods without the fracnb fraction annotation are not ours and are skipped; pods that
    terminated (phase Succeeded/Failed) hold nothing; pods being deleted still hold their
    GPUs until they are gone, so they count.
    """
    allocations = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        fraction = _pod_fraction(annotations)
        if fraction is None or (pod.get("status") or {}).get("phase") in TERMINATED_PHASES:
            continue
        user = annotations.get(USERNAME_ANNOTATION)
        if not user:
            continue
        allocations.append(
            Allocation(
                user=user,
                server=annotations.get(SERVERNAME_ANNOTATION, ""),
                fraction=fraction,
                profile=pod_profile(metadata),
                waiting=is_waiting(pod),
            )
        )
    return allocations


def used_by(allocations: Iterable[Allocation], users: Iterable[str], *, waiting_only: bool = False) -> Fraction:
    """GPUs held together by ``users`` (``waiting_only``: of those, what their queued servers reserve)."""
    members = set(users)
    return sum((a.fraction for a in allocations if a.user in members and (a.waiting or not waiting_only)), Fraction(0))


def check_request(
    policy: QuotaPolicy,
    allocations: Iterable[Allocation],
    *,
    user: str,
    groups: Mapping[str, Iterable[str]],
    server: str,
    fraction: Fraction,
) -> QuotaDecision:
    """Decide whether ``user`` may (re)start ``server`` holding ``fraction`` GPUs.

    ``groups`` maps each JupyterHub group of the user to the group's member names, since a
    group quota caps what all its members hold together. The server being (re)started does
    not count against itself. Every limit (the user's, each quota-carrying group's) must fit.
    """
    others = [a for a in allocations if not (a.user == user and a.server == server)]
    user_used = used_by(others, [user])
    user_waiting = used_by(others, [user], waiting_only=True)
    user_limit = policy.user_limit(user)
    group_uses = tuple(
        GroupUse(name, used_by(others, members), policy.groups[name], used_by(others, members, waiting_only=True))
        for name, members in sorted(groups.items())
        if name in policy.groups
    )
    needs = gpus_text(fraction)
    if fraction > 0 and user_limit is not None and user_used + fraction > user_limit:
        used = held_words(user_used, user_waiting) if user_waiting else format_gpus(user_used)
        message = f"you use {used} of your {gpus_text(user_limit)}; this choice needs {needs}"
        return QuotaDecision(False, message, fraction, user_used, user_limit, group_uses, user_waiting)
    for use in group_uses:
        if fraction > 0 and use.used + fraction > use.limit:
            group = escape_controls(use.name)  # a hub group's name, shown on the form and in the hub log
            message = f"{group} uses {use_against(use.used, use.limit, use.waiting)}; this choice needs {needs}"
            return QuotaDecision(False, message, fraction, user_used, user_limit, group_uses, user_waiting)
    return QuotaDecision(True, "within quota", fraction, user_used, user_limit, group_uses, user_waiting)


def use_against(used: Fraction, limit: Fraction, waiting: Fraction = Fraction(0)) -> str:
    """ "0.25 of 0.5 GPU", or with servers waiting in the queue "0.25 GPU + 0.25 GPU (waiting) of 0.5 GPU"."""
    return use_text(used, limit) if waiting <= 0 else f"{held_words(used, waiting)} of {gpus_text(limit)}"


def _amount(amount: Fraction) -> dict[str, Any]:
    return {"gpus": float(amount), "exact": format_fraction(amount)}


def _limit(amount: Fraction | None, *, unlimited: bool = False) -> dict[str, Any]:
    """A limit in one of the states of schemas/service-me.schema.json: limited, unlimited or none."""
    if amount is not None:
        return {"state": "limited", **_amount(amount)}
    return {"state": "unlimited" if unlimited else "none"}


def usage_report(
    policy: QuotaPolicy,
    allocations: Iterable[Allocation],
    *,
    user: str,
    groups: Mapping[str, Iterable[str]],
) -> dict[str, Any]:
    """What ``user`` and their groups hold and may hold, JSON-ready.

    The shape is schemas/service-me.schema.json. Amounts are ``{"gpus": <float for
    display>, "exact": "<ratio>"}``; limits add a ``state``: ``limited`` (with the amount),
    ``unlimited`` (the user is mapped to None in ``user_quotas``) or ``none`` (no quota
    configured). ``available`` is what one more server could still take, the tightest of
    the user's and the groups' headroom (``unlimited`` when nothing limits it).
    """
    allocations = list(allocations)
    mine = [a for a in allocations if a.user == user]
    user_used = used_by(mine, [user])
    user_limit = policy.user_limit(user)
    headrooms = [] if user_limit is None else [max(user_limit - user_used, Fraction(0))]
    group_reports = []
    for name, members in sorted(groups.items()):
        limit = policy.groups.get(name)
        used = used_by(allocations, members)
        if limit is not None:
            headrooms.append(max(limit - used, Fraction(0)))
        group_reports.append({"name": name, "used": _amount(used), "quota": _limit(limit)})
    return {
        "user": user,
        "servers": [
            {"server": a.server, "profile": a.profile, "fraction": _amount(a.fraction)}
            for a in sorted(mine, key=lambda a: a.server)
        ],
        "used": _amount(user_used),
        "quota": _limit(user_limit, unlimited=user in policy.users),
        "groups": group_reports,
        "available": _limit(min(headrooms) if headrooms else None, unlimited=True),
    }
