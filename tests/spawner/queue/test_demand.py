"""Demand read from queued pods, and what the culler and the metrics make of it (literal pods)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction

from fracnb_spawner.common.podkeys import has_queue_gate, is_waiting
from fracnb_spawner.culling import Action, CullPolicy, Reason
from fracnb_spawner.queue.demand import demand_since, queue_entries, queue_lengths, queued_at
from fracnb_spawner.quota.policy import QuotaPolicy, allocations_from_pods
from fracnb_spawner.service.cullpass import CullSettings, index_pods, judge_for
from fracnb_spawner.service.metrics import CullMetrics
from fracnb_spawner.service.page import use_rows, waiting_text
from tests.hub_pods import MIG, SHARED, T0, pod


def on_kueues_gate(waiting: dict, local_queue: str = "fracnb-bob") -> dict:
    """A pod as the kueue engine leaves it while the team has no quota for it: Kueue's gate, not fracnb's."""
    waiting["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    waiting["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = local_queue
    return waiting


def test_either_engines_gate_means_waiting_and_no_other() -> None:
    assert is_waiting(pod("a", queued=True))
    assert has_queue_gate(pod("a", queued=True))
    assert not is_waiting(pod("a"))
    assert not is_waiting(None)
    kueue = on_kueues_gate(pod("a"))
    assert is_waiting(kueue)
    assert not has_queue_gate(kueue)  # not a place the hub's own queue orders and lifts
    other_gate = pod("a")
    other_gate["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    assert not is_waiting(other_gate)


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
    waiting = on_kueues_gate(pod("kueue", queued_at="2026-11-23T14:02:00Z"))
    assert demand_since([pod("running"), waiting]) == {SHARED: T0 + timedelta(minutes=2)}


def test_a_server_on_kueues_gate_waits_in_the_gauges_the_queue_listing_and_the_admin_page() -> None:
    """With the kueue engine a server waiting for its team's quota holds no GPU: every reader says it waits."""
    bob = on_kueues_gate(pod("bob", queued_at="2026-11-23T13:30:00Z", **{"fracnb.io/max-wait": "600"}))
    pods = [pod("ann"), bob]
    metrics = CullMetrics()
    metrics.observe_pods(pods, T0)
    metrics.observe_groups(pods, {"team-a": ["ann", "bob"]})
    sample = metrics.registry.get_sample_value
    assert sample("fracnb_queue_length", {"slot_kind": SHARED}) == 1
    assert sample("fracnb_queue_longest_wait_seconds", {"slot_kind": SHARED}) == 30 * 60
    assert sample("fracnb_queue_overdue_spawns", {"slot_kind": SHARED}) == 1  # its 10 min are over
    assert sample("fracnb_allocated_gpus", {"profile": "quarter"}) == 0.25  # ann's only
    assert sample("fracnb_group_allocated_gpus", {"group": "team-a"}) == 0.25
    (entry,) = queue_entries(pods)
    assert entry.as_json(T0) == {
        "user": "bob",
        "server": "",
        "profile": "quarter",
        "slot_kind": SHARED,
        "priority": 0,
        "queued_at": "2026-11-23T13:30:00Z",
        "waited_seconds": 30 * 60.0,
        "namespace": "jhub",
        "pod": "jupyter-bob",
        "engine": "kueue",
        "local_queue": "jhub/fracnb-bob",
    }
    # The admin page's use rows say bob's share is "(waiting)"; its "Waiting for a GPU" list (api/queue's
    # entries; "Nobody is waiting for a GPU" when empty) names him too.
    _, users = use_rows(allocations_from_pods(pods), QuotaPolicy(), {"team-a": ["ann", "bob"]})
    assert [(u.name, u.used_text) for u in users] == [("ann", "0.25 GPU"), ("bob", "0.25 GPU (waiting)")]
    assert index_pods(pods)[("bob", "")].queued


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
        "engine": "builtin",
        "local_queue": "",
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
