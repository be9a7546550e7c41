"""``GET api/report`` (``?format=json``, ``csv`` or ``text``) and the page ``report``: the admins'
right-sizing report (:mod:`.history.report`) over every stored session, for hub admins only."""

from __future__ import annotations

from typing import Any

from tornado import web

from fracnb_spawner.form.advice import report_menu
from fracnb_spawner.history.report import advised_text, as_csv, as_json, as_text, load_report
from fracnb_spawner.service.api.base import ServiceHandler, require_admin
from fracnb_spawner.service.sessionstore import in_history
from fracnb_spawner.service.web import PageHandler

REPORT_FORMATS = {"json": ("application/json", as_json), "csv": ("text/csv", as_csv), "text": ("text/plain", as_text)}


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
