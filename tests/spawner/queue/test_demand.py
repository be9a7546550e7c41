"""Demand read from queued pods, and what the culler and the metrics make of it (literal pods)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction

from fracnb_spawner.culling import Action, CullPolicy, Reason
from fracnb_spawner.queue.demand import demand_since, is_queued, queue_entries, queue_lengths, queued_at
from fracnb_spawner.service.core import CullSettings, index_pods, judge_for
from fracnb_spawner.service.metrics import CullMetrics
from fracnb_spawner.service.page import waiting_text
from tests.hub_pods import MIG, SHARED, T0, pod


def test_only_the_queue_gate_means_waiting() -> None:
    assert is_queued(pod("a", queued=True))
    assert not is_queued(pod("a"))
    other_gate = pod("a")
    other_gate["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    assert not is_queued(other_gate)


def test_demand_per_slot_kind_since_the_earliest_wait() -> None:
    pods = [
        pod("running"),
        pod("late", queued=True, queued_at="2026-11-23T14:05:00.123456Z"),
        pod("early", queued=True, queued_at="2026-11-23T14:01:00Z"),
        pod("mig", kind=MIG, queued=True, queued_at="2026-11-23T14:03:00Z"),
        pod("cpu", kind="", queued=True, queued_at="2026-11-23T14:00:00Z"),
    ]
    assert demand_since(pods) == {SHARED: T0 + timedelta(minutes=1), MIG: T0 + timedelta(minutes=3)}
    assert queue_lengths(pods) == {SHARED: 2, MIG: 1, "": 1}
    assert demand_since([pod("running"), pod("other", kind=MIG)]) == {}


def test_a_notebook_waiting_on_kueues_gate_is_demand_for_its_slot_kind() -> None:
    waiting = pod("kueue", queued_at="2026-11-23T14:02:00Z")
    waiting["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    assert demand_since([pod("running"), waiting]) == {SHARED: T0 + timedelta(minutes=2)}
    assert not is_queued(waiting)  # not a place in the hub's own queue (its page, its metrics)
    assert index_pods([waiting])[("kueue", "")].queued  # but it holds no GPU yet: the admin page says "(waiting)"


def test_where_kueues_demand_was_read_a_notebook_on_its_gate_counts_only_for_its_cohort() -> None:
    waiting = pod("kueue", queued_at="2026-11-23T14:02:00Z")
    waiting["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    other_cohort = pod("other", **{"fracnb.io/idle-timeout-under-demand": "600"})
    other_cohort["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "fracnb-other"
    assert demand_since([other_cohort, waiting], kueue_gate=False) == {}
    settings = CullSettings(default_policy=CullPolicy(3600), warning_lead=600)
    held = index_pods([other_cohort])[("other", "")]
    # Kueue read, and nothing waits for the other cohort's quota: the other cohort's server is not shortened.
    assert judge_for(settings, [other_cohort, waiting], T0, queue_demand={}).demand_for(held) is None
    # Kueue unread: the broader reading, by slot kind.
    assert judge_for(settings, [other_cohort, waiting], T0).demand_for(held) == T0 + timedelta(minutes=2)


def test_an_unreadable_queue_time_falls_back_to_the_pods_creation() -> None:
    assert queued_at(pod("a", queued=True, queued_at="soon")) == datetime(2026, 11, 23, 13, 0, tzinfo=timezone.utc)


def test_queue_order_priority_then_longest_wait() -> None:
    pods = [
        pod("first-low", queued=True, queued_at="2026-11-23T13:00:00Z"),
        pod("high-late", queued=True, queued_at="2026-11-23T14:00:00Z", priority="10"),
        pod("high-early", queued=True, queued_at="2026-11-23T13:30:00Z", priority="10"),
        pod("garbage-priority", queued=True, queued_at="2026-11-23T12:00:00Z", priority="urgent"),
        pod("running", priority="99"),
    ]
    entries = queue_entries(pods)
    assert [e.user for e in entries] == ["high-early", "high-late", "garbage-priority", "first-low"]
    assert entries[0].as_json(T0 + timedelta(minutes=1)) == {
        "user": "high-early",
        "server": "",
        "profile": "quarter",
        "slot_kind": SHARED,
        "priority": 10,
        "queued_at": "2026-11-23T13:30:00Z",
        "waited_seconds": 31 * 60.0,
        "namespace": "jhub",
        "pod": "jupyter-high-early",
    }


def ready(user, last_activity):
    stamp = last_activity.isoformat().replace("+00:00", "Z")
    return {"started": "2026-11-23T10:00:00Z", "last_activity": stamp, "pending": None, "ready": True}


def test_the_culler_shortens_only_idle_servers_holding_a_kind_someone_waits_for() -> None:
    under_demand = {"fracnb.io/idle-timeout": "3600", "fracnb.io/idle-timeout-under-demand": "1200"}
    pods = [
        pod("shared-idle", **under_demand),
        pod("mig-idle", kind=MIG, **under_demand),
        pod("waiting", queued=True, queued_at="2026-11-23T13:00:00Z", **under_demand),
    ]
    settings = CullSettings(default_policy=CullPolicy(3600), warning_lead=600)
    now = T0
    judge = judge_for(settings, pods, now)
    by_server = index_pods(pods)
    idle_since = now - timedelta(minutes=25)
    _, shared = judge(ready("shared-idle", idle_since), by_server[("shared-idle", "")])
    assert (shared.action, shared.reason) == (Action.CULL, Reason.DEMAND)
    _, mig = judge(ready("mig-idle", idle_since), by_server[("mig-idle", "")])
    assert (mig.action, mig.reason, mig.cull_at) == (Action.KEEP, Reason.IDLE, idle_since + timedelta(hours=1))
    # The waiting spawn's own server is not running: it is not shortened by its own wait.
    _, own = judge(
        {"started": None, "last_activity": None, "pending": "spawn", "ready": False}, by_server[("waiting", "")]
    )
    assert own.action is Action.KEEP


def test_metrics_count_the_queue_and_what_is_held() -> None:
    metrics = CullMetrics()
    pods = [
        pod("a", fraction="1/4"),
        pod("b", fraction="1/8", **{"fracnb.io/profile": "eighth"}),
        pod("c", fraction="1/8", **{"fracnb.io/profile": "eighth"}),
        pod("w1", queued=True, queued_at="2026-11-23T13:00:00Z"),
        pod("w2", kind=MIG, queued=True, queued_at="2026-11-23T13:00:00Z"),
    ]
    metrics.observe_pods(pods)
    metrics.observe_groups(pods, {"team-a": ["a", "b", "w1"], "empty": []})
    sample = metrics.registry.get_sample_value
    assert sample("fracnb_queue_length", {"slot_kind": SHARED}) == 1
    assert sample("fracnb_queue_length", {"slot_kind": MIG}) == 1
    assert sample("fracnb_allocated_gpus", {"profile": "quarter"}) == 0.25
    assert sample("fracnb_allocated_gpus", {"profile": "eighth"}) == 0.25
    assert sample("fracnb_group_allocated_gpus", {"group": "team-a"}) == float(Fraction(3, 8))
    assert sample("fracnb_group_allocated_gpus", {"group": "empty"}) == 0
    # The next pass sees an empty queue: the kinds nobody waits for any more are gone, not stale.
    metrics.observe_pods(pods[:1])
    assert sample("fracnb_queue_length", {"slot_kind": SHARED}) is None
    assert sample("fracnb_allocated_gpus", {"profile": "eighth"}) is None


def test_waiting_text() -> None:
    assert waiting_text(T0 - timedelta(minutes=25), T0) == "25 min (since 13:35 UTC)"
    assert waiting_text(T0, T0) == "0 s (since 14:00 UTC)"
    assert waiting_text(None, T0) == "—"
