"""``GET api/me`` and ``GET api/users/<name>``: a user's GPU servers, quota and stops (service-me.schema.json;
the report is :meth:`ServiceState.user_report`)."""

from __future__ import annotations

import json

from tornado import web

from fracnb_spawner.common.logsafe import shown
from fracnb_spawner.service.api.base import ServiceHandler


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
