"""When the servers holding a kind of GPU slot are due to be stopped, and so when a waiting spawn may start. Pure.

The deadline of a holder is the one the fracnb service announces (on its page and to the notebook,
through ``api/me``): :func:`fracnb_spawner.culling.decide` over the server's pod policy, the service's
default policy and warning lead, and the demand for the slot it holds. While someone waits, that
demand is there: a holder idle longer than its ``idle_timeout_under_demand`` is due sooner than its
plain idle timeout says. What the hub cannot know is the notebook's own report of use, which the
service reads where it has one: an estimate may still be later than the stop.

An estimate past :data:`ESTIMATE_HORIZON`, or past the moment the spawn would give up waiting, is
none: "no estimate yet" says more than "about 1438 min".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from fracnb_spawner.common.podkeys import FRACTION_ANNOTATION, SERVERNAME_ANNOTATION, USERNAME_ANNOTATION, is_waiting
from fracnb_spawner.common.units import format_gpus, parse_fraction
from fracnb_spawner.culling import CullPolicy, Reason, ServerActivity, decide, policy_from_annotations
from fracnb_spawner.queue.demand import demand_since, slot_kind

ESTIMATE_HORIZON = timedelta(hours=4)  # beyond it a holder's user will likely have stopped or used it first

Activity = Callable[[str | None, str], ServerActivity | None]  # (user, server) -> the hub's record of it


@dataclass(frozen=True)
class Release:
    """A server holding a slot of the kind, and when the culler is due to stop it."""

    at: datetime
    reason: Reason
    fraction_text: str  # "0.25" (quota.format_gpus)


@dataclass(frozen=True)
class CullDefaults:
    """What the service decides with where a pod says nothing: its default policy and warning lead (seconds)."""

    policy: CullPolicy = field(default_factory=CullPolicy)
    warning_lead: float = 0


def holder_releases(
    pods: Iterable[Mapping[str, Any]],
    kind: str,
    activity: Activity,
    now: datetime,
    defaults: CullDefaults,
    *,
    demand_from: datetime | None = None,
) -> list[Release]:
    """The due stops of the servers on a node holding slots of ``kind``, with the demand for ``kind``
    that the waiting pods among ``pods`` make, and from ``demand_from`` on (a spawn that would join then: the
    form's estimate is the one its progress page will give)."""
    pods = list(pods)
    since = min((t for t in (demand_since(pods).get(kind), demand_from) if t is not None), default=None)
    releases = []
    for pod in pods:
        if slot_kind(pod) != kind or is_waiting(pod) or not (pod.get("spec") or {}).get("nodeName"):
            continue
        release = _release((pod.get("metadata") or {}).get("annotations") or {}, activity, now, defaults, since)
        if release is not None:
            releases.append(release)
    return releases


def _release(
    annotations: Mapping[str, str], activity: Activity, now: datetime, defaults: CullDefaults, since: datetime | None
) -> Release | None:
    server = activity(annotations.get(USERNAME_ANNOTATION), annotations.get(SERVERNAME_ANNOTATION, ""))
    if server is None:
        return None
    policy = policy_from_annotations(annotations, defaults.policy)
    decision = decide(server, policy, now=now, warning_lead=defaults.warning_lead, demand_since=since)
    if decision.cull_at is None or decision.reason is None:
        return None
    fraction = format_gpus(parse_fraction(annotations.get(FRACTION_ANNOTATION, "0")))
    return Release(decision.cull_at, decision.reason, fraction)


def estimate(
    releases: Iterable[Release], position: int, now: datetime, gives_up_at: datetime | None = None
) -> Release | None:
    """The release that frees the slot of the ``position``-th in line: the position-th earliest, if known,
    and none past :data:`ESTIMATE_HORIZON` or ``gives_up_at`` (when the spawn stops waiting)."""
    upcoming = sorted((r for r in releases if r.at > now), key=lambda r: r.at)
    if not 0 < position <= len(upcoming):
        return None
    release = upcoming[position - 1]
    horizon = min(now + ESTIMATE_HORIZON, gives_up_at or now + ESTIMATE_HORIZON)
    return release if release.at <= horizon else None
