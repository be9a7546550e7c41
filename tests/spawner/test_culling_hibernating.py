"""The shorter timeout under demand and warning of a GPU server whose stop under demand hibernates first
(FracnbService.idle_timeout_under_demand_hibernating, warning_lead_hibernating): the pure decision, the
service's judge, and the service refusing values that would warn a server in use."""

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest

from fracnb_spawner.culling import (
    Action,
    CullPolicy,
    CullTiming,
    HibernatingDemand,
    Reason,
    ServerActivity,
    decide,
    timing_problem,
)
from fracnb_spawner.service.app import FracnbService
from fracnb_spawner.service.cullpass import CullSettings, PodFacts, judge_for

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
PROFILE = CullPolicy(idle_timeout=3600, idle_timeout_under_demand=1800)  # the replay's 1/8 profile
HIBERNATING = HibernatingDemand(idle_timeout_under_demand=300, warning_lead=120)  # the defaults
LEAD = 900  # FracnbService.warning_lead's default


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def idle_since(seconds: float) -> ServerActivity:
    return ServerActivity(started=at(-10_000), last_activity=at(seconds))


def hibernating(now: float, server: ServerActivity, demand_since: float, policy: CullPolicy = PROFILE):
    return decide(
        server, HIBERNATING.policy(policy), now=at(now), warning_lead=LEAD, demand_since=at(demand_since),
        demand_lead=HIBERNATING.lead(LEAD),
    )  # fmt: skip


def test_the_profiles_timeout_under_demand_gives_way_only_to_a_shorter_one() -> None:
    assert HIBERNATING.policy(PROFILE).idle_timeout_under_demand == 300
    assert HIBERNATING.policy(CullPolicy(idle_timeout=3600)).idle_timeout_under_demand == 300  # none of its own
    shorter = CullPolicy(idle_timeout=3600, idle_timeout_under_demand=200)
    assert HIBERNATING.policy(shorter) == shorter
    assert HibernatingDemand(0, 120).policy(PROFILE) == PROFILE  # 0: the profile's own
    # Never longer than the usual idle timeout: then there is no timeout under demand at all.
    assert HIBERNATING.policy(CullPolicy(idle_timeout=240)).demand_timeout == 0


@pytest.mark.parametrize(
    ("ours", "usual", "lead"), [(120, 900, 120), (0, 900, 900), (120, 0, 120), (300, 60, 60), (0, 0, 0)]
)
def test_the_warning_before_a_hibernating_stop_is_the_shorter_lead(ours, usual, lead) -> None:
    assert HibernatingDemand(300, ours).lead(usual) == lead


@pytest.mark.parametrize(
    ("now", "action", "seconds_left"),
    [(100, Action.KEEP, 200), (180, Action.WARN, 120), (299, Action.WARN, 1), (300, Action.CULL, 0)],
)
def test_an_idle_hibernating_server_is_stopped_after_5_minutes_warned_2_minutes_ahead(now, action, seconds_left):
    decision = hibernating(now, idle_since(0), demand_since=-7200)
    assert (decision.action, decision.reason, decision.seconds_left) == (action, Reason.DEMAND, seconds_left)
    # Without hibernation the same server keeps its profile's 30 minutes, warned 15 ahead.
    usual = decide(idle_since(0), PROFILE, now=at(now), warning_lead=LEAD, demand_since=at(-7200))
    assert (usual.action, usual.cull_at) == (Action.KEEP, at(1800))


def test_demand_that_appears_late_still_leaves_the_hibernating_warning() -> None:
    decision = hibernating(2400, idle_since(0), demand_since=2400)
    assert (decision.action, decision.reason, decision.cull_at) == (Action.WARN, Reason.DEMAND, at(2520))
    assert hibernating(2520, idle_since(0), demand_since=2400).action is Action.CULL


def test_a_hibernating_server_in_use_is_never_warned() -> None:
    assert timing_problem(300, CullTiming(warning_lead=120, activity_report_lag=45)) is None
    for hub_lag in range(46):
        assert hibernating(0, idle_since(-hub_lag), demand_since=-7200).action is Action.KEEP, hub_lag


def test_another_deadline_within_its_own_longer_lead_still_warns() -> None:
    """The maximum age 850 s away is within the usual 15 min warning: the nearer stop under demand, 150 s away
    and not yet within its 2 minutes, does not hide it."""
    policy = CullPolicy(idle_timeout=3600, max_age=11_000, idle_timeout_under_demand=1800)
    decision = hibernating(150, idle_since(0), demand_since=-7200, policy=policy)
    assert (decision.action, decision.reason, decision.cull_at) == (Action.WARN, Reason.DEMAND, at(300))


def pod(fraction: Fraction) -> PodFacts:
    annotations = {"fracnb.io/idle-timeout": "3600", "fracnb.io/idle-timeout-under-demand": "1800"}
    return PodFacts(annotations=annotations, profile="eighth", fraction=fraction, slot_kind="eighths")


def test_the_service_applies_it_to_gpu_servers_only_while_stops_hibernate() -> None:
    model = {"started": "2026-03-01T09:00:00Z", "last_activity": "2026-03-01T12:00:00Z", "ready": True}

    def judged(settings: CullSettings, fraction: Fraction):
        # Someone has waited for the server's kind of slot for two hours.
        judge = replace(judge_for(settings, [], at(200)), demand={"eighths": at(-7200)})
        return judge(model, pod(fraction), ("ann", ""))

    on = CullSettings(CullPolicy(3600), warning_lead=LEAD, hibernating=HIBERNATING)
    policy, decision = judged(on, Fraction(1, 8))
    assert (policy.idle_timeout_under_demand, decision.action, decision.cull_at) == (300, Action.WARN, at(300))
    _, cpu = judged(on, Fraction(0))  # a CPU-only server is never asked to save
    assert cpu.cull_at == at(1800)
    _, off = judged(CullSettings(CullPolicy(3600), warning_lead=LEAD), Fraction(1, 8))
    assert (off.action, off.cull_at) == (Action.KEEP, at(1800))


def test_the_service_turns_it_on_with_hibernation_and_refuses_values_that_warn_servers_in_use(tmp_path, capsys):
    config = tmp_path / "jupyterhub_config.py"
    config.write_text("")
    service = FracnbService()
    service.initialize(["--config", str(config)])
    assert service.settings().hibernating == HibernatingDemand(300, 120)
    off = FracnbService()
    off.initialize(["--config", str(config), "--FracnbService.hibernation_timeout=0"])
    assert off.settings().hibernating is None
    for argv, said in [
        (["--FracnbService.warning_lead_hibernating=30"], "warning_lead_hibernating (30 s) is not more than"),
        (["--FracnbService.warning_lead_hibernating=0"], "idle_timeout_under_demand_hibernating (300 s) is not more"),
        (["--FracnbService.idle_timeout_under_demand_hibernating=150"], "make it more than 165 s"),
    ]:
        refused = FracnbService()
        with pytest.raises(SystemExit):
            refused.initialize(["--config", str(config), *argv])
        assert said in capsys.readouterr().err, argv


def test_its_defaults_give_way_to_a_long_activity_report_lag(tmp_path, capsys) -> None:
    """Images without the meter are heard every 330 s: 5 minutes cannot work there, so the defaults turn off
    (said in the log) rather than refuse a configuration that started before."""
    config = tmp_path / "jupyterhub_config.py"
    config.write_text("c.FracnbService.activity_report_lag = 330\nc.FracnbService.warning_lead = 400\n")
    service = FracnbService()
    service.initialize(["--config", str(config)])
    assert service.settings().hibernating.policy(PROFILE) == PROFILE
    assert service.settings().hibernating.lead(400) == 400
    assert "no shorter timeout under demand for hibernating servers" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        FracnbService().initialize(["--config", str(config), "--FracnbService.warning_lead_hibernating=340"])
