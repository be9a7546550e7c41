"""This server's activity, posted to the hub's activity API as soon as the meter sees it.

JupyterHub's single-user server posts its last activity only every
``JUPYTERHUB_ACTIVITY_INTERVAL`` seconds (300 by default): a server computing in a silent cell,
or a user who resumed work after an idle warning, could be stopped by the fracnb service
before the hub heard of it. The meter posts the same thing (``POST
$JUPYTERHUB_ACTIVITY_URL`` with the server's own token, which has the ``users:activity!user``
scope) at its own, shorter interval, and only when there is activity newer than the last post.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from .hubcalls import JsonPoster


def isoformat(moment: datetime) -> str:
    """UTC with ``Z``, as the hub writes timestamps; naive times are UTC (as in jupyter_server)."""
    aware = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    return aware.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def activity_body(server_name: str, last_activity: datetime) -> dict[str, Any]:
    """The body of ``POST /hub/api/users/<name>/activity`` for one server (JupyterHub's own shape)."""
    stamp = isoformat(last_activity)
    return {"servers": {server_name: {"last_activity": stamp}}, "last_activity": stamp}


class HubActivity:
    """Posts a server's newest activity to the hub; a no-op outside JupyterHub."""

    def __init__(self, activity_url: str, token: str, server_name: str, *, request_timeout: float = 5.0) -> None:
        usable = activity_url.startswith(("http://", "https://")) and bool(token)
        self._poster = JsonPoster(
            activity_url if usable else "", token, what="report activity to the hub", request_timeout=request_timeout
        )
        self._server_name = server_name
        self._sent: datetime | None = None

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> HubActivity:
        """The single-user server's own settings: JUPYTERHUB_ACTIVITY_URL, _API_TOKEN, _SERVER_NAME."""
        return cls(
            env.get("JUPYTERHUB_ACTIVITY_URL", ""),
            env.get("JUPYTERHUB_API_TOKEN", ""),
            env.get("JUPYTERHUB_SERVER_NAME", ""),
        )

    @property
    def enabled(self) -> bool:
        return self._poster.enabled

    @property
    def last_sent(self) -> datetime | None:
        return self._sent

    def is_new(self, last_activity: datetime) -> bool:
        return self._sent is None or last_activity > self._sent

    async def report(self, last_activity: datetime) -> bool:
        """Post ``last_activity`` if it is newer than the last one posted; True if the hub took it."""
        if not self.enabled or not self.is_new(last_activity):
            return False
        if not await self._poster.post(activity_body(self._server_name, last_activity)):
            return False  # not marked as sent: the next interval tries again
        self._sent = last_activity
        return True
