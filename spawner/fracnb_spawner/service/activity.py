"""``POST api/activity``: a notebook reports when its server was last used (use-report.schema.json).

Only the server's own token may report for it (as for ``api/sessions``): anything else is a 403,
a malformed report a 400. The service keeps the latest per server in memory
(:class:`.meterfacts.MeterFacts`), for its idle timeouts.
"""

from __future__ import annotations

import json

from tornado import web

from fracnb_spawner.culling import parse_timestamp
from fracnb_spawner.service.base import ServiceHandler
from fracnb_spawner.service.sessions import require_server_token


def use_problems(document: object) -> list[str]:
    """How ``document`` departs from use-report.schema.json (the checker loads once the service listens)."""
    from fracnb_meter.schema import USE_REPORT, problems  # noqa: PLC0415

    return problems(USE_REPORT, document, check_formats=True)


class ActivityHandler(ServiceHandler):
    @web.authenticated
    async def post(self) -> None:
        user = self.caller()
        try:
            report = json.loads(self.request.body or b"null")
        except ValueError:
            raise web.HTTPError(400, "the body is not JSON: send a use report") from None
        found = use_problems(report)
        if found:
            raise web.HTTPError(400, "not a use report: %s", "; ".join(found[:3]))
        require_server_token(self.current_user, user, report["server_name"], "use")
        last_use = parse_timestamp(report["last_use"])
        facts = getattr(self.state, "facts", None)
        if facts is not None and last_use is not None:
            facts.record_use((user, report["server_name"]), last_use, self.state.clock())
        self.set_status(204)
        self.finish()
