"""Calls to the test hub and its fracnb service that the service tests share: tokens with the scopes
a test names, GETs that show a redirect instead of following it, and session reports."""

from __future__ import annotations

import secrets
import urllib.error
import urllib.request
from datetime import timezone

from tests.history.records import report

ACCESS = "access:services!service=fracnb"


def user_token(hub, user, scopes=(ACCESS,)):
    status, body = hub.api("POST", f"users/{user}/tokens", {"scopes": list(scopes)})
    assert status == 201, body
    return body["token"]


def server_token(hub, user, server=""):
    """A token with the scopes JupyterHub gives a server's own token (plus access to the service)."""
    return user_token(hub, user, scopes=(f"access:servers!server={user}/{server}", "users:activity!user", ACCESS))


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def get(url: str, *, token: str | None = None, authorization: str | None = None) -> tuple[int, dict, str]:
    request = urllib.request.Request(url)  # noqa: S310
    if token:
        authorization = f"token {token}"
    if authorization:
        request.add_header("Authorization", authorization)
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read().decode(errors="replace")


def new_report(**figures):
    """A session report with a fresh session id."""
    return report(secrets.token_hex(16), **figures)


def post(hub, body, token):
    return hub.http("POST", hub.service_url + "api/sessions", body, token=token)


def record_activity(hub, user, when):
    """The hub's record of the user's default server's last activity, set to ``when``."""
    stamp = when.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    status, _ = hub.api("POST", f"users/{user}/activity", {"servers": {"": {"last_activity": stamp}}})
    assert status in (200, 204)
