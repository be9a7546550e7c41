"""Culling decisions with a controlled clock."""

from datetime import datetime, timedelta, timezone

import pytest

from fracnb_meter.schema import SERVICE_REPORT, problems
from fracnb_spawner.culling import (
    Action,
    CullPolicy,
    Reason,
    ServerActivity,
    decide,
    policy_from_annotations,
    server_activity,
    server_status,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def at(seconds):
    return T0 + timedelta(seconds=seconds)


def server(started=0, last_activity=None, **kwargs):
    return ServerActivity(
        started=at(started),
        last_activity=None if last_activity is None else at(last_activity),
        **kwargs,
    )


HOUR = CullPolicy(idle_timeout=3600)


@pytest.mark.parametrize(
    ("now", "action", "seconds_left"),
    [
        (100, Action.KEEP, 3500),
        (3000, Action.WARN, 600),
        (3599, Action.WARN, 1),
        (3600, Action.CULL, 0),
    ],
)
def test_idle_deadline_counts_from_last_activity(now, action, seconds_left):
    decision = decide(server(started=-5000, last_activity=0), HOUR, now=at(now), warning_lead=600)
    assert decision.action is action
    assert decision.seconds_left == seconds_left
    assert decision.cull_at == at(3600)
    assert decision.reason is Reason.IDLE


def test_without_activity_idle_counts_from_start():
    decision = decide(server(started=0), HOUR, now=at(3601), warning_lead=600)
    assert decision.action is Action.CULL


def test_max_age_culls_active_servers():
    policy = CullPolicy(idle_timeout=3600, max_age=8 * 3600)
    busy = server(started=0, last_activity=8 * 3600 - 10)
    assert decide(busy, policy, now=at(8 * 3600 - 60), warning_lead=600).reason is Reason.MAX_AGE
    decision = decide(busy, policy, now=at(8 * 3600), warning_lead=600)
    assert (decision.action, decision.reason) == (Action.CULL, Reason.MAX_AGE)


def test_zero_disables_limits_and_pending_servers_are_kept():
    never = CullPolicy(idle_timeout=0, max_age=0)
    assert decide(server(), never, now=at(10**7), warning_lead=600).action is Action.KEEP
    starting = server(pending="spawn", ready=False)
    assert decide(starting, HOUR, now=at(10**7), warning_lead=600).action is Action.KEEP


def test_policy_from_annotations_with_fallbacks():
    default = CullPolicy(idle_timeout=3600, max_age=0)
    annotations = {"fracnb.io/idle-timeout": "1800", "fracnb.io/max-age": "28800"}
    assert policy_from_annotations(annotations, default) == CullPolicy(1800, 28800)
    assert policy_from_annotations({"fracnb.io/idle-timeout": "0"}, default) == CullPolicy(0, 0)
    broken = {"fracnb.io/idle-timeout": "soon", "fracnb.io/max-age": "-5"}
    assert policy_from_annotations(broken, default) == default


def test_server_model_and_status():
    model = {
        "started": "2026-03-01T11:00:00.000000Z",
        "last_activity": "2026-03-01T12:00:00Z",
        "pending": None,
        "ready": True,
    }
    activity = server_activity(model)
    assert activity.last_activity == T0
    policy = CullPolicy(idle_timeout=1800)
    status = server_status(decide(activity, policy, now=at(1500), warning_lead=600), policy)
    assert status == {
        "idle_timeout_seconds": 1800,
        "max_age_seconds": 0,
        "deadline": {"reason": "idle", "cull_at": "2026-03-01T12:30:00Z", "seconds_left": 300.0, "warning": True},
    }


def status_at(policy: CullPolicy, now: datetime, **model_times: float) -> dict:
    activity = server(**model_times)
    status = server_status(decide(activity, policy, now=now, warning_lead=600), policy)
    assert problems(SERVICE_REPORT, status, "/$defs/cullStatus", check_formats=True) == []
    return status


def test_status_never_culled_has_no_deadline():
    status = status_at(CullPolicy(0, 0), at(10**6), started=0, last_activity=0)
    assert status == {"idle_timeout_seconds": 0, "max_age_seconds": 0, "deadline": None}


def test_status_of_a_starting_server_has_no_deadline_yet():
    activity = server(pending="spawn", ready=False)
    status = server_status(decide(activity, HOUR, now=at(10**7), warning_lead=600), HOUR)
    assert problems(SERVICE_REPORT, status, "/$defs/cullStatus", check_formats=True) == []
    assert status["deadline"] is None


def test_status_idle_deadline_before_the_warning():
    status = status_at(CullPolicy(1800, 0), at(600), started=0, last_activity=0)
    assert status["deadline"] == {
        "reason": "idle",
        "cull_at": "2026-03-01T12:30:00Z",
        "seconds_left": 1200.0,
        "warning": False,
    }


def test_status_max_age_deadline_in_the_warning():
    # Busy a minute ago, so idleness is far off; the maximum age is 4 minutes away.
    status = status_at(CullPolicy(3600, 8 * 3600), at(8 * 3600 - 240), started=0, last_activity=8 * 3600 - 300)
    assert status["deadline"] == {
        "reason": "max-age",
        "cull_at": "2026-03-01T20:00:00Z",
        "seconds_left": 240.0,
        "warning": True,
    }


def test_status_past_the_deadline_says_zero_seconds_left():
    status = status_at(CullPolicy(1800, 0), at(4000), started=0, last_activity=0)
    assert status["deadline"] is not None
    assert (status["deadline"]["seconds_left"], status["deadline"]["warning"]) == (0.0, True)
