"""The queue's pure rules against literal data: slot kinds, order, priorities, messages, configuration."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction
from zoneinfo import ZoneInfo

import pytest
from traitlets import TraitError
from traitlets.config import Config

from fracnb_spawner.cluster.slots import slot_kind
from fracnb_spawner.cluster.view import trim_pod
from fracnb_spawner.common.clock import clock_text, relative_text, when_text, zone_named
from fracnb_spawner.config.profiles import ProfileConfigError, initialize_profiles, validate_profiles
from fracnb_spawner.config.queuekey import QueueConfigError, queue_max_wait
from fracnb_spawner.culling import Reason
from fracnb_spawner.gpu.plan import GPUPlan
from fracnb_spawner.queue.config import FracnbQueue
from fracnb_spawner.queue.order import (
    Waiting,
    ordinal,
    parse_time,
    queue_annotations,
    queue_order,
    quota_share,
    user_priority,
    wait_deadline,
    waiting_from_pod,
)
from fracnb_spawner.queue.releases import Release, estimate
from fracnb_spawner.queue.text import (
    form_text,
    gave_up_message,
    kept_place_message,
    queued_message,
)
from fracnb_spawner.quota.policy import Allocation, QuotaPolicy

T0 = datetime(2026, 11, 23, 14, 0, tzinfo=timezone.utc)
BERLIN = ZoneInfo("Europe/Berlin")
QUARTER = GPUPlan("time-slicing", Fraction(1, 4), 20 * 2**30)


def test_slot_kind_names_resource_and_node_selector() -> None:
    shared = {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4", "type": "kwok"}
    assert slot_kind("nvidia.com/gpu.shared", shared) == "nvidia.com-gpu.shared.4.time-slicing.kwok"
    mig = {"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.product": "A100"}
    assert slot_kind("nvidia.com/mig-1g.10gb", mig) == "nvidia.com-mig-1g.10gb.A100.mixed"
    eighth = {**shared, "nvidia.com/gpu.replicas": "8"}
    assert slot_kind("nvidia.com/gpu.shared", eighth) != slot_kind("nvidia.com/gpu.shared", shared)
    long = slot_kind("nvidia.com/gpu.shared", {"nvidia.com/gpu.product": "X" * 80})
    assert len(long) <= 63


def test_order_is_priority_then_share_then_arrival() -> None:
    early, late = T0, T0 + timedelta(seconds=5)
    waiting = [
        Waiting("ns/bob", 0, Fraction(1, 4), early),
        Waiting("ns/carol", 0, Fraction(0), late),
        Waiting("ns/dave", 10, Fraction(1), late),
        Waiting("ns/erin", 0, Fraction(0), early),
        Waiting("ns/abe", 0, Fraction(0), early),
    ]
    assert [w.key for w in queue_order(waiting)] == ["ns/dave", "ns/abe", "ns/erin", "ns/carol", "ns/bob"]


def test_share_is_the_most_loaded_quota_of_the_user() -> None:
    policy = QuotaPolicy(default_user=Fraction(2), groups={"team-a": Fraction(8), "team-b": Fraction(4)})
    held = [Allocation("erin", "", Fraction(2)), Allocation("bob", "", Fraction(1, 2))]
    groups = {"team-a": ["bob", "erin"], "team-b": ["bob"]}
    assert quota_share(policy, held, user="bob", groups=groups) == Fraction(5, 16)  # team-a: 2.5 of 8
    assert quota_share(QuotaPolicy(), held, user="bob", groups=groups) == 0


def test_priority_is_the_users_own_else_the_highest_group() -> None:
    groups = {"staff": 10, "guests": -5}
    assert user_priority("alice", ["staff", "guests"], users={}, groups_priority=groups, default=0) == 10
    assert user_priority("alice", ["staff"], users={"alice": -1}, groups_priority=groups, default=0) == -1
    assert user_priority("zoe", ["other"], users={}, groups_priority=groups, default=3) == 3


def test_annotations_round_trip_through_a_pod() -> None:
    annotations = queue_annotations(T0, 7, 600)
    assert annotations == {
        "fracnb.io/queued-at": "2026-11-23T14:00:00.000000Z",
        "fracnb.io/queue-priority": "7",
        "fracnb.io/max-wait": "600",
    }
    pod = {"metadata": {"name": "jupyter-a", "namespace": "hub", "annotations": annotations}}
    assert waiting_from_pod(pod, Fraction(0)) == Waiting("hub/jupyter-a", 7, Fraction(0), T0)
    assert wait_deadline(pod) == T0 + timedelta(minutes=10)
    assert parse_time("nonsense") is None
    assert waiting_from_pod({"metadata": {"annotations": {}}}, Fraction(0)) is None


def test_trimmed_view_keeps_queued_pods_with_their_place() -> None:
    gated = {
        "metadata": {
            "name": "jupyter-a", "namespace": "hub", "labels": {"fracnb.io/slot-kind": "k", "other": "x"},
            "annotations": {**queue_annotations(T0, 1, 60), "unrelated": "y"},
        },
        "spec": {"schedulingGates": [{"name": "fracnb.io/queue"}], "nodeSelector": {"a": "b"},
                 "containers": [{"resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}]},
        "status": {"phase": "Pending"},
    }  # fmt: skip
    trimmed = trim_pod(gated)
    assert trimmed["spec"]["schedulingGates"] == [{"name": "fracnb.io/queue"}]
    assert trimmed["metadata"]["labels"] == {"fracnb.io/slot-kind": "k"}
    assert "unrelated" not in trimmed["metadata"]["annotations"]
    assert trim_pod({**gated, "metadata": {"name": "someone-elses"}}) is None  # unbound and not fracnb's


def test_progress_headline_with_and_without_an_estimate() -> None:
    release = Release(T0 + timedelta(minutes=5), Reason.IDLE, "0.25")
    assert queued_message(QUARTER, 2, release, T0) == (
        "Queued for a 0.25 GPU (time-slicing): 2nd in line. Estimated start about 14:05 UTC, in 5 min: "
        "an idle 0.25 GPU server is due to be stopped then. Stop the server to leave the queue."
    )
    assert "Estimated start about 15:05 CET, in 5 min:" in queued_message(QUARTER, 2, release, T0, BERLIN)
    assert "No estimate yet" in queued_message(QUARTER, 1, None, T0, BERLIN)
    later = Release(T0 + timedelta(minutes=9), Reason.MAX_AGE, "0.25")
    assert estimate([later, release], 2, T0) == later
    assert estimate([later, release], 3, T0) is None
    assert estimate([Release(T0 - timedelta(minutes=1), Reason.IDLE, "0.25")], 1, T0) is None
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "111th",
    ]  # fmt: skip


def test_gave_up_and_form_texts() -> None:
    assert gave_up_message(QUARTER, 3600) == (
        "No 0.25 GPU (time-slicing) became free within 1 h, the longest this hub lets a server wait in the "
        "queue. Choose a smaller share or a CPU-only profile, or try again later."
    )
    assert form_text(3, 0, None) == "3 free now"
    assert form_text(0, 2, 9.6) == "queue: 2 waiting, about 10 min"
    assert form_text(0, 0, None) == "queue: 0 waiting, no estimate"


def test_profile_queue_entry_is_checked_at_start() -> None:
    assert queue_max_wait(None) == 3600
    assert queue_max_wait({"max_wait": "30m"}) == 1800
    assert queue_max_wait({"max_wait": 0}) == 0
    with pytest.raises(QueueConfigError, match="unknown queue key"):
        queue_max_wait({"maxwait": 5})
    profiles = initialize_profiles([{"display_name": "Q", "slug": "q", "queue": {"max_wait": "soon"}}])
    from fracnb_spawner.gpu.backends import BackendSettings
    from fracnb_spawner.gpu.plan import GPUDefaults

    settings = BackendSettings("nvidia.com/gpu.shared", "nvidia.com/gpu.shared", "h", "k", "l", "q", 0.95)
    with pytest.raises(ProfileConfigError, match=r"profile 'q' \('Q'\): queue.max_wait"):
        validate_profiles(profiles, GPUDefaults("time-slicing", 80 * 2**30, "A100-80GB", {}), settings)


@pytest.mark.parametrize(
    ("trait", "value"),
    [("group_priorities", {"staff": "high"}), ("user_priorities", {"a": 5000}), ("default_priority", True)],
)
def test_priorities_are_checked_at_start(trait: str, value: object) -> None:
    config = Config()
    setattr(config.FracnbQueue, trait, value)
    with pytest.raises(TraitError, match=f"FracnbQueue.{trait}"):
        FracnbQueue(config=config)


def test_times_are_shown_in_the_configured_zone_and_from_now() -> None:
    assert clock_text(T0) == "14:00 UTC"
    assert clock_text(T0.replace(tzinfo=None)) == "14:00 UTC"  # naive, as from the hub's database
    assert clock_text(T0, BERLIN) == "15:00 CET"
    summer = datetime(2026, 7, 1, 12, 5, tzinfo=timezone.utc)
    assert clock_text(summer, BERLIN) == "14:05 CEST"
    assert clock_text(T0, zone_named("Asia/Kolkata")) == "19:30 IST"
    assert relative_text(T0 + timedelta(minutes=12, seconds=20), T0) == "in 12 min"
    assert relative_text(T0 + timedelta(minutes=65), T0) == "in 1 h 5 min"
    assert relative_text(T0 + timedelta(seconds=20), T0) == "in under a minute"
    assert when_text(T0 + timedelta(minutes=12), T0, BERLIN) == "15:12 CET, in 12 min"


@pytest.mark.parametrize("name", ["Mars/Olympus", "CET+1", "../etc/passwd", ""])
def test_an_unknown_display_zone_is_refused_at_start(name: str) -> None:
    config = Config()
    config.FracnbQueue.display_timezone = name
    with pytest.raises(TraitError, match=r"FracnbQueue.display_timezone: .* use an IANA name such as 'Europe/Berlin'"):
        FracnbQueue(config=config)


def test_the_display_zone_defaults_to_utc() -> None:
    assert FracnbQueue().zone == ZoneInfo("UTC")
    config = Config()
    config.FracnbQueue.display_timezone = "Europe/Berlin"
    assert FracnbQueue(config=config).zone == BERLIN


def test_the_form_tells_a_place_kept_over_a_hub_restart() -> None:
    until = T0 + timedelta(minutes=50)
    assert kept_place_message(None, until, T0, BERLIN) == (
        "Your place in the GPU queue is kept until 15:50 CET, in 50 min: start the same choice again to rejoin it."
    )
    assert kept_place_message(QUARTER, until, T0).startswith(
        "Your place in the queue for a 0.25 GPU (time-slicing) is kept until 14:50 UTC, in 50 min:"
    )
