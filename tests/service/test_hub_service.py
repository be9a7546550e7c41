"""The fracnb service against a real JupyterHub with real single-user servers."""

from __future__ import annotations

ACCESS = "access:services!service=fracnb"


def user_token(hub, user, scopes=(ACCESS,)):
    status, body = hub.api("POST", f"users/{user}/tokens", {"scopes": list(scopes)})
    assert status == 201, body
    return body["token"]


def test_api_without_token_is_denied(hub):
    for path in ("api/me", "metrics", "api/users/anyone"):
        status, _ = hub.http("GET", hub.service_url + path)
        assert status == 403, path


def test_api_with_another_users_token_is_denied(hub, new_user):
    owner, other = new_user(), new_user()
    status, body = hub.http(
        "GET", f"{hub.service_url}api/users/{owner}", token=user_token(hub, other)
    )
    assert status == 403
    assert f"{other} may not read the status of {owner}" in body["message"]


def test_token_without_service_access_is_denied(hub, new_user):
    user = new_user()
    token = user_token(hub, user, scopes=("read:users:activity!user",))
    status, _ = hub.http("GET", hub.service_url + "api/me", token=token)
    assert status == 403


def test_metrics_with_token(hub, new_user):
    status, body = hub.http("GET", hub.service_url + "metrics", token=user_token(hub, new_user()))
    assert status == 200
    assert "fracnb_cull_pass_duration_seconds" in body
