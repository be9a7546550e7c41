"""HTTP API of the service; every endpoint requires a hub token with access to the service."""

from __future__ import annotations

import json
from typing import Any

from jupyterhub.services.auth import HubAuthenticated
from tornado import web

from fracnb_spawner.service.metrics import CONTENT_TYPE


class ServiceHandler(HubAuthenticated, web.RequestHandler):
    """Token auth only (``Authorization: token ...``): no login redirect, a 403 instead."""

    def initialize(self, state: Any) -> None:
        self.state = state
        self.hub_auth = state.hub_auth

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error = kwargs.get("exc_info", (None, None))[1]
        message = getattr(error, "log_message", None) or self._reason
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"status": status_code, "message": message}))

    def caller(self) -> str:
        model = self.current_user
        if model.get("kind", "user") != "user":
            raise web.HTTPError(403, "only users have GPU quotas and servers")
        return model["name"]


class UserStatusHandler(ServiceHandler):
    """``GET api/me`` and ``GET api/users/<name>`` (a user may only read their own)."""

    @web.authenticated
    async def get(self, name: str | None = None) -> None:
        caller = self.caller()
        if name is not None and name != caller:
            raise web.HTTPError(403, f"{caller} may not read the status of {name}")
        report = await self.state.user_report(caller)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(report))


class MetricsHandler(ServiceHandler):
    @web.authenticated
    def get(self) -> None:
        self.set_header("Content-Type", CONTENT_TYPE)
        self.finish(self.state.metrics.exposition())


def make_app(state: Any, prefix: str) -> web.Application:
    prefix = "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"
    handlers: list[Any] = [
        (rf"{prefix}api/me", UserStatusHandler, {"state": state}),
        (rf"{prefix}api/users/([^/]+)", UserStatusHandler, {"state": state}),
        (rf"{prefix}metrics", MetricsHandler, {"state": state}),
    ]
    return web.Application(handlers)
