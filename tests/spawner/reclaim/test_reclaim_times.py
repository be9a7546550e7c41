"""The reclaim pass's times read from the cluster: the evictions of the last minute from the service's own
events (the limit holds across a restart), and a notebook's reclaim latency from its pod's own condition."""

from __future__ import annotations

from datetime import datetime, timezone

from fracnb_spawner.reclaim.times import eviction_ages, reclaim_seconds

NOW = datetime(2026, 12, 6, 1, 30, 0, tzinfo=timezone.utc)


def event(at: str, reason: str = "Reclaimed", source: str = "fracnb-service") -> dict:
    return {"reason": reason, "source": {"component": source}, "firstTimestamp": at, "lastTimestamp": at}


def test_the_last_minutes_evictions_are_read_from_the_services_events() -> None:
    events = [
        event("2026-12-06T01:29:50Z"),  # written at 01:29:50.x: counted as 9 s ago, until 01:30:51
        event("2026-12-06T01:28:58Z"),  # 61 s ago, read as 60: past the minute
        event("2026-12-06T01:29:01Z"),
        event("2026-12-06T01:29:55Z", reason="Preempted", source="default-scheduler"),
        event("2026-12-06T01:29:56Z", source="someone-else"),
        event("2026-12-06T01:30:30Z"),  # a clock ahead of ours wrote it: no age to count
        {"reason": "Reclaimed", "source": {"component": "fracnb-service"}},  # no time
    ]
    assert eviction_ages(events, NOW) == [58.0, 9.0]  # oldest first
    assert eviction_ages([{"reason": "Reclaimed", "reportingComponent": "fracnb-service",
                           "eventTime": "2026-12-06T01:29:59.500000Z"}], NOW) == [0.0]  # fmt: skip


def notebook(conditions: list[dict]) -> dict:
    return {"metadata": {"name": "jupyter-alice"}, "status": {"conditions": conditions}}


def test_the_reclaim_latency_runs_to_the_pods_own_scheduling_time() -> None:
    evicted_at = datetime(2026, 12, 6, 1, 0, 0, 400000, tzinfo=timezone.utc)
    gated = {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
             "lastTransitionTime": "2026-12-06T00:59:00Z"}  # fmt: skip
    assert reclaim_seconds(evicted_at, notebook([gated])) is None  # its gate lifted, not scheduled yet
    scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-06T01:00:31Z"}
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-06T01:00:45Z"}
    # Not the pass that noticed it (up to FracnbReclaim.every later): the pod's own time.
    assert reclaim_seconds(evicted_at, notebook([ready, scheduled])) == 30.6
    quick = {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-06T01:00:00Z"}
    assert reclaim_seconds(evicted_at, notebook([quick])) == 0.0  # the condition's time is cut to the second
