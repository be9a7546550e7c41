"""The hibernation endpoints of the server extension (docs/hibernation.md has the contract).

- ``POST fracnb/api/hibernate``: save every idle kernel (hibernation-request → hibernation-report);
- ``GET fracnb/api/hibernation/states``: the saved states (hibernation-states);
- ``DELETE fracnb/api/hibernation/states/<key>``: discard one;
- ``POST fracnb/api/hibernation/restore``: restore one into a running kernel (restore-request →
  restore-report); the restore runs in that kernel.

All are authenticated like the meter's others, and authorised on the server's kernels: under
JupyterHub, a token with ``access:servers`` on this server (the fracnb service's) may call them.
"""

from __future__ import annotations

import json
import os
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from fracnb_schemas import HIBERNATION_REQUEST, RESTORE_REQUEST, problems

from . import serverside
from .hibernator import RestoreRefusedError, RestoreRequest
from .notice import STOP_REASONS

KEY_PATTERN = r"(?P<key>[^/]+)"


class _HibernationHandler(APIHandler):
    auth_resource = "kernels"

    @property
    def meter(self) -> Any:
        return self.settings["fracnb_meter"]

    def body_of(self, schema: str) -> dict[str, Any]:
        """The request's JSON body, or a 400 that says what is wrong with it."""
        try:
            body = json.loads(self.request.body or b"null")
        except ValueError:
            raise web.HTTPError(400, reason="the body is not JSON") from None
        found = problems(schema, body)
        if found:
            raise web.HTTPError(400, reason=f"the body does not fit {schema}: {'; '.join(found[:3])}")
        return body

    def check_enabled(self) -> None:
        if not self.meter.hibernation_enabled:
            raise web.HTTPError(404, reason="hibernation is turned off here (c.FracnbMeter.hibernation_enabled)")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        # A JSON error with the reason; never a traceback.
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"message": self._reason, "status": status_code}))


class HibernateHandler(_HibernationHandler):
    """Save every idle kernel of this server (the hub's fracnb service calls it before a stop)."""

    _track_activity = False  # the hub asking is not the user using the server

    @web.authenticated
    @authorized(action="execute")
    async def post(self) -> None:
        self.check_enabled()
        body = self.body_of(HIBERNATION_REQUEST)
        stop = self.get_argument("stop", None)  # in the query: a hub that says nothing of it is as welcome
        if stop is not None and stop not in STOP_REASONS:
            raise web.HTTPError(400, reason=f"stop={stop!r} is none of {', '.join(STOP_REASONS)}")
        report = await self.meter.hibernation.save(float(body["timeout_seconds"]), body.get("max_bytes"), stop=stop)
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(report))


class StatesHandler(_HibernationHandler):
    """The saved states of this server, for the notebook's front ends."""

    _track_activity = False  # the panel polling is not use either

    @web.authenticated
    @authorized(action="read")
    async def get(self) -> None:
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(serverside.list_states(os.environ)))


class StateHandler(_HibernationHandler):
    @web.authenticated
    @authorized(action="write")
    async def delete(self, key: str) -> None:
        try:
            removed = serverside.discard_state(os.environ, key)
        except ValueError as error:
            raise web.HTTPError(400, reason=str(error)) from None
        except serverside.layout.UnsafeStateError as error:
            raise web.HTTPError(409, reason=str(error)) from None
        if not removed:
            raise web.HTTPError(404, reason=f"there is no saved state {key}")
        self.set_status(204)
        self.finish()


class RestoreHandler(_HibernationHandler):
    """Restore a saved state into one of this server's kernels (the user's click)."""

    @web.authenticated
    @authorized(action="execute")
    async def post(self) -> None:
        self.check_enabled()
        body = self.body_of(RESTORE_REQUEST)
        request = RestoreRequest(
            kernel_id=body["kernel_id"],
            key=body["key"],
            saved_at=body.get("saved_at"),
            force=bool(body.get("force")),
            on_conflict=body.get("on_conflict"),
        )
        try:
            report = await self.meter.hibernation.restore(request)
        except RestoreRefusedError as refused:
            raise web.HTTPError(refused.status, reason=refused.reason) from None
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(report))


def handlers() -> list[tuple[str, type]]:
    return [
        (r"/fracnb/api/hibernate", HibernateHandler),
        (r"/fracnb/api/hibernation/states", StatesHandler),
        (rf"/fracnb/api/hibernation/states/{KEY_PATTERN}", StateHandler),
        (r"/fracnb/api/hibernation/restore", RestoreHandler),
    ]
