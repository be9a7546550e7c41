"""The times the reclaim pass reads from the cluster rather than from its own memory. Pure.

- The per-minute eviction limit counts the service's evictions of the last minute. Each eviction
  leaves an event on its pod (reason ``Reclaimed``, source ``fracnb-service``) that outlives the pod
  and the service: a restarted service reads them back (:func:`eviction_ages`) and goes on counting
  where the one before it stopped.
- ``fracnb_reclaim_seconds`` runs from the first eviction for a waiting notebook to its pod's own
  ``PodScheduled`` condition turning true (:func:`reclaim_seconds`), not to the pass that noticed it.

The apiserver keeps an event's and a condition's time to the second, cut down: an event's time
is read as the end of its second (an eviction counts a little longer, never shorter).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from fracnb_spawner.culling import parse_timestamp

EVENT_REASON = "Reclaimed"
EVENT_SOURCE = "fracnb-service"
# The events' field selector: the service's own reclaim events, in every namespace.
EVENT_SELECTOR = f"reason={EVENT_REASON},source={EVENT_SOURCE}"
LIMIT_WINDOW_SECONDS = 60.0
_SECOND = timedelta(seconds=1)


def _time(raw: Any) -> datetime | None:
    try:
        return parse_timestamp(raw) if isinstance(raw, str) else None
    except ValueError:
        return None


def event_time(event: Mapping[str, Any]) -> datetime | None:
    """When the service wrote ``event``: its ``lastTimestamp``, ``firstTimestamp`` or ``eventTime``; None
    without a readable one."""
    for key in ("lastTimestamp", "firstTimestamp", "eventTime"):
        moment = _time(event.get(key))
        if moment is not None:
            return moment
    return None


def eviction_ages(events: Iterable[Mapping[str, Any]], now: datetime) -> list[float]:
    """Seconds since each of the service's evictions of the last minute, oldest first, from its
    ``Reclaimed`` events (each read as the end of its second). Events of other reasons or sources are
    skipped, and so are events dated after ``now`` (written by a clock ahead of this one: they cannot
    say how long ago they were)."""
    ages = []
    for event in events:
        source = (event.get("source") or {}).get("component") or event.get("reportingComponent")
        moment = event_time(event) if event.get("reason") == EVENT_REASON and source == EVENT_SOURCE else None
        if moment is None or moment > now:
            continue
        age = max(0.0, (now - moment - _SECOND).total_seconds())
        if age < LIMIT_WINDOW_SECONDS:
            ages.append(age)
    return sorted(ages, reverse=True)


def scheduled_at(pod: Mapping[str, Any]) -> datetime | None:
    """When kube-scheduler bound the pod: its ``PodScheduled`` condition's last transition to True; None
    while it is not scheduled."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return _time(condition.get("lastTransitionTime"))
    return None


def reclaim_seconds(evicted_at: datetime, pod: Mapping[str, Any]) -> float | None:
    """Seconds from the first eviction for a waiting notebook (``evicted_at``, the service's clock) to its
    pod being scheduled (the pod's own condition); None while it is not scheduled yet. Never negative:
    the condition's time is cut to the second."""
    moment = scheduled_at(pod)
    return None if moment is None else max(0.0, (moment - evicted_at).total_seconds())
