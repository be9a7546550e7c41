"""``POST api/stop-saves``: what a server Kueue stopped saved as it stopped (stop-save.schema.json).

Kueue preempts a notebook by deleting its pod. The notebook saves its idle kernels' variables in the pod's grace
period (``FRACNB_STOP_HIBERNATION_TIMEOUT``), after the hub's last look at the pod, so only the notebook knows what
was saved: it posts its report here with the server's own token (anything else is a 403, a malformed report a
400). The service finds the server's pod, still terminating, reads Kueue's reason from its ``TerminationTarget``
condition, and keeps the stop's notice (service/kueuestopnotice.py) with what was saved in the session history
(history/stopnotices.py, reason ``kueue``), where the hub's pages read it: "Your server stopped at 14:05 CET,
preempted by a higher-priority job of team-b; 41 variables of train.ipynb saved. ...". It stands in for the hub's
own notice of that stop (same time), which could not count. The answer carries the notice
(stop-save-answer.schema.json): the notebook passes it on to its open JupyterLab tabs, which say the same words
(the hub's poll has not seen the stop yet). A server Kueue did not stop gets no notice from here (``null``). A
notice told while the session history is not open yet (the service's first seconds) or cannot be written is kept by
the service and written once it can (:meth:`ServiceState.write_stop`): the notebook tells it once, in its last
seconds.
"""

from __future__ import annotations

import json

from tornado import web

from fracnb_schemas import STOP_SAVE
from fracnb_spawner.service.api.base import ServerReportHandler


class StopSaveHandler(ServerReportHandler):
    @web.authenticated
    async def post(self) -> None:
        user, document = self.server_report(
            STOP_SAVE, "what the server saved at its stop (stop-save.schema.json)", "save at its stop"
        )
        notice = await self.state.record_stop_save(user, document["server_name"], document["hibernation"])
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"notice": notice.details["text"] if notice is not None else None}))
