"""The service's routes: its HTTP API (every endpoint requires a hub token with access to the service) and,
with the page's sources, the web page."""

from __future__ import annotations

import secrets
from typing import Any

from tornado import web

from fracnb_spawner.common.timehtml import LOCAL_TIMES_SCRIPT
from fracnb_spawner.service.api.activity import ActivityHandler
from fracnb_spawner.service.api.advice import AdviceHandler
from fracnb_spawner.service.api.base import ServiceHandler
from fracnb_spawner.service.api.me import UserStatusHandler
from fracnb_spawner.service.api.metrics import MetricsHandler
from fracnb_spawner.service.api.queue import QueueHandler
from fracnb_spawner.service.api.report import ReportHandler, ReportPageHandler
from fracnb_spawner.service.api.sessions import SessionsHandler
from fracnb_spawner.service.api.stopsaves import StopSaveHandler
from fracnb_spawner.service.web import TEMPLATES, PageSources, page_routes


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
