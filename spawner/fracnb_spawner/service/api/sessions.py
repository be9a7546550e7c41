"""``api/sessions``: notebooks report their session statistics; users read their own history.

- ``POST api/sessions`` takes a report (schemas/session-report.schema.json) only with the token of
  the server it describes: JupyterHub gives a server's token ``access:servers!server=<user>/<server>``
  and no other token of the user has that exact scope unless the user asked for it. Anything else
  is a 403, a malformed report a 400, both before anything is stored. An accepted report also keeps the
  server's pod's ``fracnb.io/busy-since`` in step with its kernels (:mod:`..busymarks`, for the hub's placement).
- ``GET api/sessions`` lists the caller's own sessions; ``GET api/users/<name>/sessions`` the same
  for ``name``, which only the user themself or a hub admin may read.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from tornado import web

from fracnb_schemas import SESSION_REPORT
from fracnb_spawner.common.logsafe import shown
from fracnb_spawner.history.store import ReportConflictError, sessions_of
from fracnb_spawner.service.api.base import ServerReportHandler
from fracnb_spawner.service.sessionstore import in_history, store_and_count

MAX_LISTED = 500

log = logging.getLogger("fracnb.service")


def record_json(record: dict[str, Any]) -> dict[str, Any]:
    """A stored record as JSON: times in ISO 8601 UTC with ``Z``, no internal row id."""
    out = {key: value for key, value in record.items() if key != "id"}
    for key in ("started_at", "ended_at", "reported_at"):
        if out[key] is not None:
            out[key] = out[key].isoformat() + "Z"
    return out


class SessionsHandler(ServerReportHandler):
    @web.authenticated
    async def post(self) -> None:
        user, report = self.server_report(SESSION_REPORT, "a session report", "sessions")
        facts = getattr(self.state, "facts", None)
        if facts is not None:  # in memory, for the GPU-unused timeouts: kept even when the database is away
            facts.record_report((user, report["server_name"]), report, self.state.clock())
        marks = getattr(self.state, "busy_marks", None)
        if marks is not None:  # on the pod, where the hub's placement reads it
            await marks.note((user, report["server_name"]), report, self.state.clock())
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
