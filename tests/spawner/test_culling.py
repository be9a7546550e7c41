"""Culling decisions with a controlled clock."""

from datetime import datetime, timedelta, timezone

import pytest

from fracnb_schemas import SERVICE_REPORT, problems
from fracnb_spawner.culling import (
    Action,
    CullPolicy,
    CullTiming,
    CullTimingError,
    Reason,
    ServerActivity,
    check_timing,
    decide,
    policy_from_annotations,
    server_activity,
    server_status,
    timing_problem,
    warning_lead_problem,
)
from fracnb_spawner.service.app import FracnbService

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


# ---- timeouts the activity path can honour ----------------------------------------------------


@pytest.mark.parametrize(("idle_timeout", "warning_lead", "lag"), [(120, 60, 45), (1800, 900, 45), (3600, 900, 330)])
def test_accepted_timing_never_warns_a_server_in_use(idle_timeout, warning_lead, lag) -> None:
    timing = CullTiming(warning_lead=warning_lead, activity_report_lag=lag)
    assert timing_problem(idle_timeout, timing) is None
    assert warning_lead_problem(timing) is None
    policy = CullPolicy(idle_timeout=idle_timeout)
    # In constant use, the hub's last activity is at most `lag` old whenever the culler looks.
    for hub_lag in range(lag + 1):
        decision = decide(server(started=-10_000, last_activity=-hub_lag), policy, now=at(0), warning_lead=warning_lead)
        assert decision.action is Action.KEEP, (hub_lag, decision)


def test_the_demos_two_minute_timeout_is_refused_with_jupyterhubs_own_activity_reports() -> None:
    # JupyterHub alone reports activity every 300 s: a 2-minute timeout stops servers in use.
    problem = timing_problem(120, CullTiming(warning_lead=60, activity_report_lag=330))
    assert problem is not None
    assert "servers in use would be warned and stopped" in problem
    assert "make it more than 390 s" in problem


@pytest.mark.parametrize(
    ("idle_timeout", "warning_lead", "expected"),
    [
        (120, 120, "not more than FracnbService.warning_lead (120 s) plus"),  # warned from the start
        (100, 60, "servers in use would be warned; make it more than 105 s"),
        (30, 0, "would be warned and stopped; make it more than 45 s"),
    ],
)
def test_idle_timeouts_too_short_for_the_warning_and_the_lag_are_refused(idle_timeout, warning_lead, expected) -> None:
    problem = timing_problem(idle_timeout, CullTiming(warning_lead=warning_lead, activity_report_lag=45))
    assert problem is not None
    assert expected in problem


def test_no_idle_timeout_needs_no_timing() -> None:
    assert timing_problem(0, CullTiming(warning_lead=900, activity_report_lag=45)) is None


def test_a_warning_shorter_than_the_lag_is_refused_and_none_is_allowed() -> None:
    problem = warning_lead_problem(CullTiming(warning_lead=30, activity_report_lag=45))
    assert problem is not None
    assert "work resumed after the warning could reach the hub only after the server is stopped" in problem
    assert warning_lead_problem(CullTiming(warning_lead=0, activity_report_lag=45)) is None


def test_check_timing_names_where_the_timeout_is_set() -> None:
    timing = CullTiming(warning_lead=600, activity_report_lag=45)
    check_timing([("a", 3600), ("b", 0)], timing)
    with pytest.raises(CullTimingError, match=r"^profile 'q': an idle timeout of 300 s is not more than"):
        check_timing([("a", 3600), ("profile 'q'", 300)], timing)
    with pytest.raises(CullTimingError, match=r"^FracnbService.warning_lead \(10 s\)"):
        check_timing([], CullTiming(warning_lead=10, activity_report_lag=45))


def test_the_service_refuses_to_start_with_a_default_timeout_it_cannot_honour(tmp_path, capsys) -> None:
    config = tmp_path / "jupyterhub_config.py"
    config.write_text("c.FracnbService.default_idle_timeout = 120\nc.FracnbService.warning_lead = 100\n")
    service = FracnbService()
    with pytest.raises(SystemExit) as stopped:
        service.initialize(["--config", str(config)])
    assert stopped.value.code == 1
    assert "refusing to start, FracnbService.default_idle_timeout: an idle timeout of 120 s" in capsys.readouterr().err
    accepted = FracnbService()
    accepted.initialize(["--config", str(config), "--FracnbService.warning_lead=60"])
    assert accepted.timing() == CullTiming(warning_lead=60, activity_report_lag=45)


# ---- a shorter idle timeout while someone waits for the slot ----------------------------------

UNDER_DEMAND = CullPolicy(idle_timeout=3600, idle_timeout_under_demand=1200)


def test_without_demand_the_shorter_timeout_changes_nothing() -> None:
    idle = server(started=-5000, last_activity=0)
    for now in (100, 1300, 3000, 3600):
        assert decide(idle, UNDER_DEMAND, now=at(now), warning_lead=600) == decide(
            idle, HOUR, now=at(now), warning_lead=600
        )


@pytest.mark.parametrize(
    ("now", "action", "seconds_left"),
    [
        (100, Action.KEEP, 1100),
        (600, Action.WARN, 600),
        (1199, Action.WARN, 1),
        (1200, Action.CULL, 0),
    ],
)
def test_under_demand_an_idle_server_gets_the_shorter_timeout(now, action, seconds_left) -> None:
    # Someone has waited since long before; the server has been idle since 0.
    idle = server(started=-5000, last_activity=0)
    decision = decide(idle, UNDER_DEMAND, now=at(now), warning_lead=600, demand_since=at(-7200))
    assert (decision.action, decision.reason, decision.seconds_left) == (action, Reason.DEMAND, seconds_left)
    assert decision.cull_at == at(1200)


def test_demand_that_appears_late_still_leaves_the_whole_warning() -> None:
    # Idle for 40 minutes when someone starts waiting: stopped a warning lead later, not at once.
    idle = server(started=-5000, last_activity=0)
    decision = decide(idle, UNDER_DEMAND, now=at(2400), warning_lead=600, demand_since=at(2400))
    assert (decision.action, decision.reason, decision.cull_at) == (Action.WARN, Reason.DEMAND, at(3000))
    assert decide(idle, UNDER_DEMAND, now=at(3000), warning_lead=600, demand_since=at(2400)).action is Action.CULL
    # ... unless the usual deadline comes first: the shorter timeout never makes it later.
    later = decide(idle, UNDER_DEMAND, now=at(3100), warning_lead=600, demand_since=at(3100))
    assert (later.reason, later.cull_at) == (Reason.IDLE, at(3600))


def test_under_demand_a_server_in_use_is_never_warned() -> None:
    timing = CullTiming(warning_lead=600, activity_report_lag=45)
    assert timing_problem(UNDER_DEMAND.idle_timeout_under_demand, timing) is None
    for hub_lag in range(46):
        busy = server(started=-10_000, last_activity=-hub_lag)
        decision = decide(busy, UNDER_DEMAND, now=at(0), warning_lead=600, demand_since=at(-7200))
        assert decision.action is Action.KEEP, (hub_lag, decision)


def test_activity_moves_a_demand_deadline_back() -> None:
    used_again = server(started=-5000, last_activity=900)
    decision = decide(used_again, UNDER_DEMAND, now=at(1000), warning_lead=600, demand_since=at(-7200))
    assert (decision.action, decision.cull_at) == (Action.KEEP, at(2100))


def test_the_shorter_timeout_applies_only_when_shorter() -> None:
    assert CullPolicy(idle_timeout=600, idle_timeout_under_demand=1200).demand_timeout == 0
    assert CullPolicy(idle_timeout=0, idle_timeout_under_demand=1200).demand_timeout == 1200
    assert CullPolicy(idle_timeout=3600).demand_timeout == 0
    longer = CullPolicy(idle_timeout=600, idle_timeout_under_demand=1200)
    idle = server(started=-5000, last_activity=0)
    decision = decide(idle, longer, now=at(100), warning_lead=60, demand_since=at(-7200))
    assert (decision.reason, decision.cull_at) == (Reason.IDLE, at(600))


def test_max_age_first_is_still_reported_as_max_age() -> None:
    policy = CullPolicy(idle_timeout=3600, max_age=1000, idle_timeout_under_demand=1200)
    decision = decide(server(started=0, last_activity=0), policy, now=at(900), warning_lead=600, demand_since=at(0))
    assert (decision.reason, decision.cull_at) == (Reason.MAX_AGE, at(1000))


def test_the_status_of_a_demand_deadline_fits_the_schema() -> None:
    idle = server(started=-5000, last_activity=0)
    decision = decide(idle, UNDER_DEMAND, now=at(900), warning_lead=600, demand_since=at(-60))
    status = server_status(decision, UNDER_DEMAND)
    assert problems(SERVICE_REPORT, status, "/$defs/cullStatus", check_formats=True) == []
    assert status == {
        "idle_timeout_seconds": 3600,
        "max_age_seconds": 0,
        "deadline": {"reason": "demand", "cull_at": "2026-03-01T12:20:00Z", "seconds_left": 300.0, "warning": True},
    }


def test_the_timeout_under_demand_is_read_from_the_pod() -> None:
    annotations = {"fracnb.io/idle-timeout": "3600", "fracnb.io/idle-timeout-under-demand": "1200"}
    assert policy_from_annotations(annotations, CullPolicy()) == UNDER_DEMAND
    broken = {"fracnb.io/idle-timeout": "3600", "fracnb.io/idle-timeout-under-demand": "soon"}
    assert policy_from_annotations(broken, CullPolicy()).idle_timeout_under_demand == 0
