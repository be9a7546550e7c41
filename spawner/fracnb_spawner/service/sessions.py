"""``api/sessions``: notebooks report their session statistics; users read their own history.

- ``POST api/sessions`` takes a report (schemas/session-report.schema.json) only with the token of
  the server it describes: JupyterHub gives a server's token ``access:servers!server=<user>/<server>``
  and no other token of the user has that exact scope unless the user asked for it. Anything else
  is a 403, a malformed report a 400, both before anything is stored.
- ``GET api/sessions`` lists the caller's own sessions; ``GET api/users/<name>/sessions`` the same
  for ``name``, which only the user themself or a hub admin may read.
- ``GET api/report`` (``?format=json``, ``csv`` or ``text``) and the page ``report``: the admins'
  right-sizing report (:mod:`.history.report`), for hub admins only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.exc import SQLAlchemyError
from tornado import web

from fracnb_schemas import SESSION_REPORT
from fracnb_spawner.common.logsafe import shown
from fracnb_spawner.form.advice import report_menu
from fracnb_spawner.history.report import advised_text, as_csv, as_json, as_text, load_report
from fracnb_spawner.history.store import ReportConflictError, sessions_of, store_report
from fracnb_spawner.service.base import ServiceHandler
from fracnb_spawner.service.web import PageHandler

MAX_LISTED = 500


def report_problems(document: object) -> list[str]:
    """How ``document`` departs from session-report.schema.json.

    jsonschema (with its format checkers) takes seconds to import on a busy machine: it loads here,
    once the service listens (:func:`load_checker`), never before, since the hub gives a managed
    service about ten seconds to answer.
    """
    from fracnb_schemas import problems  # noqa: PLC0415

    return problems(SESSION_REPORT, document, check_formats=True)


def load_checker() -> None:
    """Import the schema checker ahead of the first report (run in a thread after the service listens)."""
    report_problems({})


GROUPS_TTL = 600.0  # seconds a user's groups are reused for the per-group metrics

log = logging.getLogger("fracnb.service")


async def user_groups(state: Any, user: str) -> list[str]:
    """The user's JupyterHub groups, asked of the hub at most every GROUPS_TTL seconds; [] if it fails."""
    cache: dict[str, tuple[float, list[str]]] = state.__dict__.setdefault("_groups_cache", {})
    now = time.monotonic()
    if user in cache and now - cache[user][0] < GROUPS_TTL:
        return cache[user][1]
    try:
        groups = list((await state.hub.user(user)).get("groups") or [])
    except Exception as error:
        log.warning("Could not read the groups of %s for the session metrics: %s", shown(user), error)
        groups = []
    cache[user] = (now, groups)
    return groups


def server_scope(user: str, server: str) -> str:
    return f"access:servers!server={user}/{server}"


def require_server_token(model: dict[str, Any], user: str, server: str, what: str) -> None:
    """A 403 unless the caller's token is the server's own (``access:servers`` on exactly that server)."""
    if server_scope(user, server) not in (model.get("scopes") or []):
        raise web.HTTPError(
            403, "only the token of server %s of %s may report its %s", shown(server), shown(user), what
        )


def record_json(record: dict[str, Any]) -> dict[str, Any]:
    """A stored record as JSON: times in ISO 8601 UTC with ``Z``, no internal row id."""
    out = {key: value for key, value in record.items() if key != "id"}
    for key in ("started_at", "ended_at", "reported_at"):
        if out[key] is not None:
            out[key] = out[key].isoformat() + "Z"
    return out


def history_of(state: Any) -> Any:
    """The service's session factory, or a 503 while there is none."""
    history = getattr(state, "history", None)
    if history is None:
        raise web.HTTPError(503, "the session history database is not open yet: try again shortly")
    return history


Result = TypeVar("Result")


async def in_database(state: Any, operation: str, work: Callable[..., Result], *args: Any, **kwargs: Any) -> Result:
    """``work(history, *args, **kwargs)`` in a thread; a database failure is counted
    (``fracnb_session_database_errors_total``), logged, and raised again (``SQLAlchemyError``)."""
    history = history_of(state)
    try:
        return await asyncio.to_thread(work, history, *args, **kwargs)
    except SQLAlchemyError as error:
        state.history_metrics.database_errors.labels(operation=operation).inc()
        log.error("The session history database failed (%s): %s", operation, error)
        raise


async def in_history(state: Any, operation: str, work: Callable[..., Result], *args: Any, **kwargs: Any) -> Result:
    """:func:`in_database`, a database failure answered 503."""
    try:
        return await in_database(state, operation, work, *args, **kwargs)
    except SQLAlchemyError:
        raise web.HTTPError(503, "the session history database is unavailable: try again shortly") from None


async def store_and_count(state: Any, user: str, report: Any) -> None:
    """Store a report and count what it added in the metrics; ``SQLAlchemyError`` (counted) while the
    database is away."""
    stored = await in_database(state, "store", store_report, user, report)
    if stored is not None:
        state.history_metrics.record(stored, await user_groups(state, user))


class SessionsHandler(ServiceHandler):
    @web.authenticated
    async def post(self) -> None:
        user = self.caller()
        report = self.checked_body(SESSION_REPORT, "a session report")
        require_server_token(self.current_user, user, report["server_name"], "sessions")
        facts = getattr(self.state, "facts", None)
        if facts is not None:  # in memory, for the GPU-unused timeouts: kept even when the database is away
            facts.record_report((user, report["server_name"]), report, self.state.clock())
        try:
            await store_and_count(self.state, user, report)
        except ReportConflictError as error:
            raise web.HTTPError(409, "%s", str(error)) from None
        except SQLAlchemyError:
            # The database is away (counted and logged): keep the report until it answers (a notebook
            # sends its last one once).
            self.state.pending_reports.keep(user, report)
            log.warning("Keeping %s's session report until the session database answers", shown(user))
            self.set_status(202)
            self.finish()
            return
        self.set_status(204)
        self.finish()

    @web.authenticated
    async def get(self, name: str | None = None) -> None:
        model = self.current_user
        caller = self.caller()
        name = caller if name is None else name
        if name != caller and not model.get("admin"):
            raise web.HTTPError(403, "%s may not read the sessions of %s", shown(caller), shown(name))
        records = await in_history(self.state, "read", sessions_of, name, limit=MAX_LISTED)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps({"user": name, "sessions": [record_json(r) for r in records]}))


REPORT_FORMATS = {"json": ("application/json", as_json), "csv": ("text/csv", as_csv), "text": ("text/plain", as_text)}


def require_admin(model: dict[str, Any]) -> None:
    if model.get("kind", "user") != "user" or not model.get("admin"):
        raise web.HTTPError(
            403, "the right-sizing report is for hub admins: it shows every user's sessions. Your own GPU "
            "servers and quota are on the fracnb page"
        )  # fmt: skip


async def admins_report(state: Any) -> Any:
    """The report over every stored session, advised over the hub's profile list as users are."""
    menu = getattr(state, "advice_menu", None)  # None: advised over the choices in the data
    located = None if menu is None else report_menu(menu.profiles, menu.rows, menu.headroom, menu.min_sessions)
    return await in_history(state, "report", load_report, menu=located)


class ReportHandler(ServiceHandler):
    """``GET api/report?format=json|csv|text``: the admins' report over every stored session."""

    @web.authenticated
    async def get(self) -> None:
        require_admin(self.current_user)
        chosen = self.get_argument("format", "json")
        if chosen not in REPORT_FORMATS:
            raise web.HTTPError(400, "format must be one of %s", ", ".join(REPORT_FORMATS))
        content_type, render = REPORT_FORMATS[chosen]
        report = await admins_report(self.state)
        self.set_header("Content-Type", f"{content_type}; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(render(report))


class ReportPageHandler(PageHandler):
    """``GET report``: the same report as a page, and ``GET report.csv`` / ``report.json`` as files, for hub
    admins logged in through the hub (the page's links work with the browser's own login; ``api/report``
    is for API clients with a token)."""

    @web.authenticated
    async def get(self, suffix: str | None = None) -> None:
        require_admin(self.current_user)
        report = await admins_report(self.sources.state)
        self.set_header("Cache-Control", "no-store")
        if suffix is None:
            self.render("report.html", report=report, percent=_percent, advised_text=advised_text)
            return
        content_type, render = REPORT_FORMATS[suffix]
        self.set_header("Content-Type", f"{content_type}; charset=utf-8")
        if suffix == "csv":
            self.set_header("Content-Disposition", 'attachment; filename="fracnb-report.csv"')
        self.finish(render(report))


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f} %"
