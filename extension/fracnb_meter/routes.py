"""The meter's HTTP endpoints, apart from the extension app that serves them (as in the JupyterLab
extension template): ``GET {base_url}fracnb/api/usage`` and ``GET {base_url}fracnb/api/session``.

Both are authenticated and need read access to kernels; both leave the server's activity alone,
since watching the meter is not using the server (polling must not defeat idle culling).
"""

from __future__ import annotations

from typing import Protocol

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web


class MeterDocuments(Protocol):
    """What the handlers ask of the extension app (fracnb_meter.server.FracnbMeter)."""

    async def usage_json(self) -> str: ...

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
    """GPU usage of this server's kernels (schemas/usage.schema.json)."""

    async def document(self, meter: MeterDocuments) -> str:
        return await meter.usage_json()


class SessionHandler(MeterHandler):
    """This session's statistics so far (schemas/session-stats.schema.json)."""

    async def document(self, meter: MeterDocuments) -> str:
        return meter.session_json()


ROUTES = [(r"/fracnb/api/usage", UsageHandler), (r"/fracnb/api/session", SessionHandler)]
