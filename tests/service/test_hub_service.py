"""The fracnb service against a real JupyterHub with real single-user servers."""

from __future__ import annotations

import secrets
from datetime import timedelta

import pytest

from fracnb_schemas import SERVICE_REPORT, problems
from fracnb_spawner.culling import CullPolicy, parse_timestamp
from fracnb_spawner.hibernation.settings import HibernationSettings
from fracnb_spawner.quota.policy import QuotaPolicy
from fracnb_spawner.service.cullpass import CullSettings, cull_pass, user_report, utcnow
from fracnb_spawner.service.hubapi import HubAPI
from fracnb_spawner.service.metrics import CullMetrics
from tests.service.calls import record_activity, user_token


def test_api_without_token_is_denied(hub):
    for path in ("api/me", "metrics", "api/users/anyone"):
        status, _ = hub.http("GET", hub.service_url + path)
        assert status == 403, path


def test_api_with_another_users_token_is_denied(hub, new_user):
    owner, other = new_user(), new_user()
    status, body = hub.http("GET", f"{hub.service_url}api/users/{owner}", token=user_token(hub, other))
    assert status == 403
    assert f"{other!r} may not read the status of {owner!r}" in body["message"]


def test_token_without_service_access_is_denied(hub, new_user):
    user = new_user()
    token = user_token(hub, user, scopes=("read:users:activity!user",))
    status, _ = hub.http("GET", hub.service_url + "api/me", token=token)
    assert status == 403


def test_metrics_with_token(hub, new_user):
    status, body = hub.http("GET", hub.service_url + "metrics", token=user_token(hub, new_user()))
    assert status == 200
    assert "fracnb_cull_pass_duration_seconds" in body


@pytest.fixture
def two_servers(hub, new_user):
    """An idle and an active user, each with a running single-user server."""
    idle, active = new_user("idle"), new_user("active")
    hub.start_server(idle)
    hub.start_server(active)
    return idle, active


def settings(**kwargs):
    defaults = {
        "default_policy": CullPolicy(idle_timeout=3600),
        "warning_lead": 600,
        "page_size": 1,
    }
    return CullSettings(**{**defaults, **kwargs})


async def test_culling_pass_stops_idle_server_and_spares_active_one(hub, two_servers, make_pod, pod_source):
    idle, active = two_servers
    started = utcnow()
    # The active server reports activity 30 minutes on; the clock is put 20 minutes on.
    record_activity(hub, active, started + timedelta(minutes=30))
    make_pod(idle, idle_timeout=900)
    make_pod(active, idle_timeout=900)
    pods = pod_source
    metrics = CullMetrics()
    api = HubAPI(hub.api_url, hub.service_token)
    try:
        report = await cull_pass(api, pods, settings(), metrics, clock=lambda: started + timedelta(minutes=20))
    finally:
        api.close()
    assert (idle, "", "idle") in report.culled
    assert all(user != active for user, _, _ in report.culled)
    assert not hub.server_running(idle)
    assert hub.server_running(active)
    reclaimed = metrics.registry.get_sample_value(
        "fracnb_reclaimed_gpu_fraction_total", {"reason": "idle", "profile": "quarter"}
    )
    assert reclaimed == 0.25
    idle_hours = metrics.registry.get_sample_value(
        "fracnb_idle_gpu_fraction_hours_total", {"reason": "idle", "profile": "quarter"}
    )
    # A quarter GPU idle for a bit over 20 minutes (since the server's last activity).
    assert 0.25 * 20 / 60 <= idle_hours < 0.25 * 22 / 60


async def test_warning_before_deadline(hub, two_servers, make_pod, pod_source):
    user, _ = two_servers
    _, model = hub.api("GET", f"users/{user}")
    last = parse_timestamp(model["servers"][""]["last_activity"])
    make_pod(user, idle_timeout=900)
    pods = pod_source
    api = HubAPI(hub.api_url, hub.service_token)
    try:
        before = await user_report(
            api, pods, QuotaPolicy(), settings(), user, clock=lambda: last + timedelta(minutes=10)
        )
        assert problems(SERVICE_REPORT, before, check_formats=True) == []
        deadline = before["culling"][""]["deadline"]
        assert (deadline["reason"], deadline["warning"], deadline["seconds_left"]) == ("idle", True, 300)
        assert parse_timestamp(deadline["cull_at"]) == last + timedelta(seconds=900)
        assert "saves_variables" not in deadline, "without hibernation the warning may not claim a save"
        # With hibernation on (the service's default settings), the quarter-GPU server's idle stop saves first.
        saving = await user_report(
            api, pods, QuotaPolicy(), settings(), user, clock=lambda: last + timedelta(minutes=10),
            hibernates=HibernationSettings().applies,
        )  # fmt: skip
        assert problems(SERVICE_REPORT, saving, check_formats=True) == []
        assert saving["culling"][""]["deadline"] == {**deadline, "saves_variables": True}
        assert before["servers"] == [{"server": "", "profile": "quarter", "fraction": {"gpus": 0.25, "exact": "1/4"}}]
        # Nobody configured a quota in this policy.
        assert (before["quota"], before["available"]) == ({"state": "none"}, {"state": "unlimited"})
        early = await user_report(api, pods, QuotaPolicy(), settings(), user, clock=lambda: last + timedelta(minutes=4))
        assert early["culling"][""]["deadline"]["warning"] is False
        report = await cull_pass(api, pods, settings(), CullMetrics(), clock=lambda: last + timedelta(minutes=14))
        assert all(u != user for u, _, _ in report.culled)
        assert hub.server_running(user)
    finally:
        api.close()


def test_api_me_with_own_token(hub, new_user, make_pod):
    ann, bob = new_user("ann"), new_user("bob")
    # team-a has a quota of 2 GPUs in the hub's config file, which the service loads.
    status, _ = hub.api("POST", "groups/team-a", {"users": [ann, bob]})
    assert status == 201
    hub.start_server(ann)
    make_pod(ann, fraction="1/8", profile="eighth", idle_timeout=1800)
    make_pod(bob, fraction="3/2", profile="one-and-a-half")
    status, body = hub.http("GET", hub.service_url + "api/me", token=user_token(hub, ann))
    assert status == 200, body
    assert problems(SERVICE_REPORT, body, check_formats=True) == []
    assert body["user"] == ann
    assert body["servers"] == [{"server": "", "profile": "eighth", "fraction": {"gpus": 0.125, "exact": "1/8"}}]
    assert body["quota"] == {"state": "limited", "gpus": 1.0, "exact": "1"}
    assert body["groups"] == [
        {
            "name": "team-a",
            "used": {"gpus": 1.625, "exact": "13/8"},
            "quota": {"state": "limited", "gpus": 2.0, "exact": "2"},
        }
    ]
    # The group's headroom (3/8) is tighter than the user's (7/8).
    assert body["available"] == {"state": "limited", "gpus": 0.375, "exact": "3/8"}
    culling = body["culling"][""]
    assert (culling["idle_timeout_seconds"], culling["max_age_seconds"]) == (1800, 0)
    assert (culling["deadline"]["reason"], culling["deadline"]["warning"]) == ("idle", False)
    assert 1700 < culling["deadline"]["seconds_left"] <= 1800


def test_api_me_of_an_unlimited_user_never_culled(hub, unlimited_user, make_pod):
    """The hub's config maps this user to None; their pod has neither idle timeout nor max age."""
    hub.start_server(unlimited_user)
    make_pod(unlimited_user, fraction="1/4", idle_timeout=0, max_age=0)
    status, body = hub.http("GET", hub.service_url + "api/me", token=user_token(hub, unlimited_user))
    assert status == 200, body
    assert problems(SERVICE_REPORT, body, check_formats=True) == []
    assert body["used"] == {"gpus": 0.25, "exact": "1/4"}
    assert (body["quota"], body["available"]) == ({"state": "unlimited"}, {"state": "unlimited"})
    assert body["culling"][""] == {"idle_timeout_seconds": 0, "max_age_seconds": 0, "deadline": None}


async def test_max_age_deadline(hub, new_user, make_pod, pod_source):
    user = new_user("old")
    hub.start_server(user)
    _, model = hub.api("GET", f"users/{user}")
    started = parse_timestamp(model["servers"][""]["started"])
    make_pod(user, idle_timeout=0, max_age=8 * 3600)
    api = HubAPI(hub.api_url, hub.service_token)
    at = started + timedelta(hours=8, minutes=-4)
    try:
        # Hibernation on, but not at max-age stops (hibernate_at_max_age's default), and then on.
        report = await user_report(
            api, pod_source, QuotaPolicy(), settings(), user, clock=lambda: at, hibernates=HibernationSettings().applies
        )
        saving = await user_report(
            api, pod_source, QuotaPolicy(), settings(), user, clock=lambda: at,
            hibernates=HibernationSettings(at_max_age=True).applies,
        )  # fmt: skip
    finally:
        api.close()
    assert problems(SERVICE_REPORT, report, check_formats=True) == []
    deadline = report["culling"][""]["deadline"]
    assert (deadline["reason"], deadline["warning"], deadline["seconds_left"]) == ("max-age", True, 240)
    assert parse_timestamp(deadline["cull_at"]) == started + timedelta(hours=8)
    assert "saves_variables" not in deadline
    assert problems(SERVICE_REPORT, saving, check_formats=True) == []
    assert saving["culling"][""]["deadline"]["saves_variables"] is True


def forged_lines(log_file) -> list[str]:
    return [line for line in log_file.read_text().splitlines() if line.startswith("FORGED")]


def test_user_text_in_urls_cannot_forge_hub_log_lines(hub, new_user) -> None:
    token = user_token(hub, new_user())
    marker = secrets.token_hex(4)
    paths = [
        f"api/users/{marker}%0AFORGED%20admin%20logged%20in",  # a newline, decoded by the router
        f"api/users/{marker}%0D%0AFORGED%20crlf",
        f"api/users/{marker}%E2%80%A8FORGED%20line%20separator",
        f"api/users/{marker}%25s%25d%25(x)s",  # "%s%d%(x)s": text, not a format
        f"api/{marker}%0AFORGED%20unknown%20path",
    ]
    for path in paths:
        status, body = hub.http("GET", hub.service_url + path, token=token)
        assert status in (403, 404), (path, body)
        assert isinstance(body, dict), body  # JSON errors, never an HTML page
    _, body = hub.http("GET", f"{hub.service_url}api/users/{marker}%0AFORGED", token=token)
    assert f"'{marker}\\nFORGED'" in body["message"], "the user sees the name, escaped"
    _, body = hub.http("GET", f"{hub.service_url}api/users/{marker}%25s%25d%25(x)s", token=token)
    assert f"'{marker}%s%d%(x)s'" in body["message"]
    # The service logged each refusal (escaped) before answering; none started a line of its own.
    log = hub.log_file.read_text()
    assert f"{marker}\\nFORGED admin logged in" in log
    assert f"{marker}\\u2028FORGED line separator" in log
    assert forged_lines(hub.log_file) == []
    assert "Logging error" not in log
