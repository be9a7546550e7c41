"""The base of the service's API handlers: hub-token authentication, JSON errors, safe log lines, checked
bodies, and who may call what (a server's own token, a hub admin)."""

from __future__ import annotations

import json
from typing import Any

from jupyterhub.services.auth import HubAuthenticated
from tornado import web

from fracnb_spawner.common.logsafe import shown


def load_checker() -> None:
    """Import the schema checker ahead of the first report (run in a thread after the service listens).

    jsonschema (with its format checkers) takes seconds to import on a busy machine: it loads here, once the
    service listens, never before, since the hub gives a managed service about ten seconds to answer.
    """
    from fracnb_schemas import SESSION_REPORT, problems  # noqa: PLC0415

    problems(SESSION_REPORT, {}, check_formats=True)


def server_scope(user: str, server: str) -> str:
    return f"access:servers!server={user}/{server}"


def require_server_token(model: dict[str, Any], user: str, server: str, what: str) -> None:
    """A 403 unless the caller's token is the server's own (``access:servers`` on exactly that server)."""
    if server_scope(user, server) not in (model.get("scopes") or []):
        raise web.HTTPError(
            403, "only the token of server %s of %s may report its %s", shown(server), shown(user), what
        )


def require_admin(model: dict[str, Any]) -> None:
    if model.get("kind", "user") != "user" or not model.get("admin"):
        raise web.HTTPError(
            403, "the right-sizing report is for hub admins: it shows every user's sessions. Your own GPU "
            "servers and quota are on the fracnb page"
        )  # fmt: skip


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
        from fracnb_schemas import problems  # noqa: PLC0415 - loaded once the service listens (load_checker)

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


class ServerReportHandler(ServiceHandler):
    """A ``POST`` a notebook makes about its own server: only that server's token may (else a 403), and the
    body must fit the schema (else a 400), both checked before anything is kept."""

    def server_report(self, schema: str, what: str, reports: str) -> tuple[str, Any]:
        """The caller and its checked document; ``what`` names the document, ``reports`` what the server's
        token may report ("sessions": "only the token of server x of ann may report its sessions")."""
        user = self.caller()
        document = self.checked_body(schema, what)
        require_server_token(self.current_user, user, document["server_name"], reports)
        return user, document
