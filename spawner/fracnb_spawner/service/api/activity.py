"""``POST api/activity``: a notebook reports when its server was last used (use-report.schema.json).

Only the server's own token may report for it (as for ``api/sessions``): anything else is a 403,
a malformed report a 400. The service keeps the latest per server in memory
(:class:`.meterfacts.MeterFacts`), for its idle timeouts.
"""

from __future__ import annotations

from tornado import web

from fracnb_schemas import USE_REPORT
from fracnb_spawner.culling import parse_timestamp
from fracnb_spawner.service.api.base import ServerReportHandler


class ActivityHandler(ServerReportHandler):
    @web.authenticated
    async def post(self) -> None:
        user, report = self.server_report(USE_REPORT, "a use report", "use")
        last_use = parse_timestamp(report["last_use"])
        facts = getattr(self.state, "facts", None)
        if facts is not None and last_use is not None:
            facts.record_use((user, report["server_name"]), last_use, self.state.clock())
        self.set_status(204)
        self.finish()
