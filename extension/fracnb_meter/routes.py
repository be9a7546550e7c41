"""The meter's HTTP endpoints, apart from the extension app that serves them (as in the JupyterLab
extension template): ``GET {base_url}fracnb/api/usage``, ``GET {base_url}fracnb/api/session``, and
``GET``/``PUT {base_url}fracnb/api/display-zone`` (the browser's time zone, for the kernel's times).

All are authenticated and need access to kernels; all leave the server's activity alone,
since watching the meter is not using the server (polling must not defeat idle culling).
"""

from __future__ import annotations

import json
import os
from typing import Any, Protocol

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from fracnb_schemas import DISPLAY_ZONE, problems

from .displayzone import save_zone, saved_zone_name


class MeterDocuments(Protocol):
    """What the handlers ask of the extension app (fracnb_meter.server.FracnbMeter)."""

    async def usage_json(self, *, page: bool = True) -> str: ...

    def session_json(self) -> str: ...


class MeterHandler(APIHandler):
    """A JSON document of the meter's, never cached; subclasses say which."""

    auth_resource = "kernels"
    _track_activity = False

    @web.authenticated
    @authorized(action="read")
    async def get(self) -> None:
        self.set_header("Cache-Control", "no-store")
        self.finish(await self.document(self.settings["fracnb_meter"]))

    async def document(self, meter: MeterDocuments) -> str:
        raise NotImplementedError


class UsageHandler(MeterHandler):
    """GPU usage of this server's kernels (schemas/usage.schema.json). ``?reader=hub``: the hub asking before
    a stop (fracnb_spawner.hibernation.userstop), not a page polling, which a hibernation's answer waits for."""

    async def document(self, meter: MeterDocuments) -> str:
        return await meter.usage_json(page=self.get_argument("reader", "page") != "hub")


class SessionHandler(MeterHandler):
    """This session's statistics so far (schemas/session-stats.schema.json)."""

    async def document(self, meter: MeterDocuments) -> str:
        return meter.session_json()


EXAMPLE_BODY = 'send {"time_zone": "America/New_York"}, an IANA name'


class DisplayZoneHandler(APIHandler):
    """The browser's time zone, kept for the kernel's times (schemas/display-zone.schema.json)."""

    auth_resource = "kernels"
    _track_activity = False  # a page opening is not the user using the server

    @web.authenticated
    @authorized(action="read")
    async def get(self) -> None:
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps({"time_zone": saved_zone_name(os.environ)}))

    @web.authenticated
    @authorized(action="write")
    async def put(self) -> None:
        try:
            body: Any = json.loads(self.request.body or b"null")
        except ValueError:
            raise web.HTTPError(400, reason=f"the body is not JSON; {EXAMPLE_BODY}") from None
        found = problems(DISPLAY_ZONE, body)
        if found or body["time_zone"] is None:
            why = "; ".join(found[:3]) or "time_zone is null"
            raise web.HTTPError(400, reason=f"the body does not fit {DISPLAY_ZONE}: {why}; {EXAMPLE_BODY}")
        try:
            save_zone(os.environ, body["time_zone"])
        except ValueError as error:
            raise web.HTTPError(400, reason=str(error)) from None
        self.set_status(204)
        self.finish()

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        # A JSON error with the reason; never a traceback.
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"message": self._reason, "status": status_code}))


ROUTES = [
    (r"/fracnb/api/usage", UsageHandler),
    (r"/fracnb/api/session", SessionHandler),
    (r"/fracnb/api/display-zone", DisplayZoneHandler),
]
