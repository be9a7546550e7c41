"""The base of the service's API handlers: hub-token authentication, JSON errors, safe log lines."""

from __future__ import annotations

import json
from typing import Any

from jupyterhub.services.auth import HubAuthenticated
from tornado import web

from fracnb_spawner.common.logsafe import shown


class ServiceHandler(HubAuthenticated, web.RequestHandler):
    """Token auth only (``Authorization: token ...``): no login redirect, a 403 instead."""

    def initialize(self, state: Any) -> None:
        self.state = state
        self.hub_auth = state.hub_auth

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error = kwargs.get("exc_info", (None, None))[1]
        message = self._reason
        if isinstance(error, web.HTTPError) and error.log_message:
            message = error.log_message % error.args  # without args, tornado has doubled each "%"
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"status": status_code, "message": message}))

    def _request_summary(self) -> str:
        # Tornado's access and error log lines start with this; the method and URI are the client's text.
        return f"{shown(self.request.method)} {shown(self.request.uri, 500)} ({self.request.remote_ip})"

    def caller(self) -> str:
        model = self.current_user
        if model.get("kind", "user") != "user":
            raise web.HTTPError(403, "only users have GPU quotas and servers")
        return model["name"]
