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

    def checked_body(self, schema: str, what: str) -> Any:
        """The request's JSON body, which must fit ``schema`` (a file of fracnb_schemas); else a 400 that says
        what is wrong, ``what`` naming the document to send ("a use report")."""
        from fracnb_schemas import problems  # noqa: PLC0415 - loaded once the service listens (sessions.load_checker)

        try:
            document = json.loads(self.request.body or b"null")
        except ValueError:
            raise web.HTTPError(400, "the body is not JSON: send %s", what) from None
        found = problems(schema, document, check_formats=True)
        if found:
            raise web.HTTPError(400, "not %s: %s", what, "; ".join(found[:3]))
        return document

    def caller(self) -> str:
        model = self.current_user
        if model.get("kind", "user") != "user":
            raise web.HTTPError(403, "only users have GPU quotas and servers")
        return model["name"]
