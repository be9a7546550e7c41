"""``api/activity`` of the fracnb service, against a real JupyterHub: only a server's own token reports its use,
and the report moves that server's idle deadline (the hub's activity counts a browser tab's polling)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from fracnb_spawner.culling import isoformat
from tests.service.calls import ACCESS, record_activity, server_token, user_token


def post(hub, body, token):
    return hub.http("POST", hub.service_url + "api/activity", body, token=token)


def use(server: str = "") -> dict:
    return {"server_name": server, "last_use": isoformat(datetime.now(timezone.utc))}


def test_the_servers_use_report_moves_its_idle_deadline(hub, new_user, make_pod):
    user = new_user()
    hub.start_server(user)
    make_pod(user, idle_timeout=3600)
    try:
        # The hub hears of the server for half an hour on (a page polling it, through the proxy).
        record_activity(hub, user, datetime.now(timezone.utc) + timedelta(minutes=30))
        before = hub.http("GET", hub.service_url + "api/me", token=user_token(hub, user))[1]
        assert before["culling"][""]["deadline"]["seconds_left"] > 5000
        # Its notebook says it was last used now: the hour counts from there.
        assert post(hub, use(), server_token(hub, user))[0] == 204
        after = hub.http("GET", hub.service_url + "api/me", token=user_token(hub, user))[1]
        deadline = after["culling"][""]["deadline"]
        assert 3500 < deadline["seconds_left"] <= 3600, deadline
    finally:
        hub.api("DELETE", f"users/{user}/server")


@pytest.mark.parametrize(
    "scopes",
    [(ACCESS,), ("access:servers!user", ACCESS), ("inherit",)],
    ids=["service-access-only", "all-of-the-users-servers", "inherit"],
)
def test_tokens_other_than_the_servers_own_cannot_report(hub, new_user, scopes):
    status, body = post(hub, use(), user_token(hub, new_user(), scopes=scopes))
    assert status == 403, body
    assert "only the token of server '' of" in body["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"server_name": ""}, "'last_use' is a required property"),
        ({"server_name": "", "last_use": "yesterday"}, "is not a 'date-time'"),
        ({**use(), "user": "someone-else"}, "Additional properties are not allowed"),
    ],
)
def test_malformed_reports_are_refused(hub, new_user, body, message):
    status, answer = post(hub, body, server_token(hub, new_user()))
    assert status == 400
    assert message in answer["message"]
