"""HTTP API of the service; every endpoint requires a hub token with access to the service."""

from __future__ import annotations

import json
import secrets
from typing import Any

from tornado import web

from fracnb_spawner.common.logsafe import shown
from fracnb_spawner.common.timehtml import LOCAL_TIMES_SCRIPT
from fracnb_spawner.queue.demand import queue_entries
from fracnb_spawner.service.activity import ActivityHandler
from fracnb_spawner.service.base import ServiceHandler
from fracnb_spawner.service.metrics import CONTENT_TYPE
from fracnb_spawner.service.nextadvice import AdviceHandler
from fracnb_spawner.service.sessions import ReportHandler, ReportPageHandler, SessionsHandler
from fracnb_spawner.service.stopsaves import StopSaveHandler
from fracnb_spawner.service.web import TEMPLATES, PageSources, page_routes


class UserStatusHandler(ServiceHandler):
    """``GET api/me`` and ``GET api/users/<name>`` (a user may only read their own)."""

    @web.authenticated
    async def get(self, name: str | None = None) -> None:
        caller = self.caller()
        if name is not None and name != caller:
            # Names go in as arguments, shown escaped: a "%" in them is not a format, a newline not a new line.
            raise web.HTTPError(403, "%s may not read the status of %s", shown(caller), shown(name))
        report = await self.state.user_report(caller)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(report))


class QueueHandler(ServiceHandler):
    """``GET api/queue``: the spawns waiting for a GPU slot, for hub admins only."""

    @web.authenticated
    async def get(self) -> None:
        model = self.current_user
        if model.get("kind", "user") != "user" or not model.get("admin"):
            raise web.HTTPError(403, "only hub admins may read the queue")
        pods = await self.state.pods.list_pods()
        now = self.state.clock()
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps({"queue": [entry.as_json(now) for entry in queue_entries(pods)]}))


class MetricsHandler(ServiceHandler):
    @web.authenticated
    def get(self) -> None:
        self.set_header("Content-Type", CONTENT_TYPE)
        self.finish(self.state.metrics.exposition())


class NotFoundHandler(ServiceHandler):
    """Unknown paths: a JSON 404, logged through :meth:`ServiceHandler._request_summary`."""

    def prepare(self) -> None:
        raise web.HTTPError(404)


def history_routes(prefix: str, state: Any, pages: PageSources | None) -> list[Any]:
    routes: list[Any] = [
        (rf"{prefix}api/sessions", SessionsHandler, {"state": state}),
        (rf"{prefix}api/activity", ActivityHandler, {"state": state}),
        (rf"{prefix}api/stop-saves", StopSaveHandler, {"state": state}),
        (rf"{prefix}api/users/([^/]+)/sessions", SessionsHandler, {"state": state}),
        (rf"{prefix}api/report", ReportHandler, {"state": state}),
        (rf"{prefix}api/advice", AdviceHandler, {"state": state}),
    ]
    if pages is not None:
        routes.append((rf"{prefix}report(?:\.(csv|json))?", ReportPageHandler, {"sources": pages}))
    return routes


def make_app(state: Any, prefix: str, pages: PageSources | None = None) -> web.Application:
    """The API under ``prefix``; with ``pages``, the web page at ``prefix`` itself too."""
    prefix = "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"
    handlers: list[Any] = [
        (rf"{prefix}api/me", UserStatusHandler, {"state": state}),
        (rf"{prefix}api/users/([^/]+)", UserStatusHandler, {"state": state}),
        (rf"{prefix}api/queue", QueueHandler, {"state": state}),
        (rf"{prefix}metrics", MetricsHandler, {"state": state}),
        *history_routes(prefix, state, pages),
    ]
    settings: dict[str, Any] = {}
    if pages is not None:
        handlers += page_routes(prefix, pages)
        # The OAuth cookie only needs to outlive this process: after a restart the hub logs users in again.
        settings = {
            "template_path": str(TEMPLATES),
            "cookie_secret": secrets.token_bytes(32),
            # Every page's times in the reader's zone (common/timehtml.py): base.html ends with the script.
            "ui_methods": {"local_times_script": lambda handler: LOCAL_TIMES_SCRIPT},
        }
    return web.Application(
        handlers, default_handler_class=NotFoundHandler, default_handler_args={"state": state}, **settings
    )
