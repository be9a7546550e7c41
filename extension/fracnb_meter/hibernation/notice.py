"""The server's last hibernation, kept for the stopped-server notice.

The hub's fracnb service stops the server right after the hibernation answers, so the JupyterLab
page that will say "Variables of train.ipynb saved at 14:05 CET ..." must have read the report before:
the usage document carries it (``hibernation``), and the answer waits until a page that is polling
the usage document has read it once, for at most :data:`NOTICE_WAIT_S` and never past the request's
time limit. A page that was not polling (a hidden tab, none open) costs no wait; it says what its
last document said, and the service's page and ``api/me`` say what was saved.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from fracnb_schemas import USAGE, load

# The report also goes to the open pages as a jupyter_server event: a stop its user asked for reaches no
# poll (JupyterHub takes the server off its proxy before the hub asks for the save), but the pages'
# event socket, open before, still carries it (@fracnb/meter's model.ts takes it in).
HIBERNATED_EVENT = "https://events.fracnb.io/fracnb_meter/hibernated/v1"
HIBERNATED_SCHEMA = {
    "$id": HIBERNATED_EVENT,
    "version": "1",
    "title": "fracnb hibernation",
    "description": "This server's hibernation just before a stop: its report (hibernation-report.schema.json).",
    "type": "object",
    "required": ["report"],
    "properties": {
        "report": {"type": "object", "description": "The hibernation's report."},
        "stop": {"type": ["string", "null"], "description": "Why the server is being stopped, as the hub said."},
        "notice": {"type": ["string", "null"], "description": "The stop's notice, as the hub's pages say it."},
    },
}
# Sent as the server starts its save at a stop (atstop.py: SIGTERM on a pod Kueue manages). jupyter_server has
# stopped taking new requests by then, so the pages' polls fail (503 from the proxy, whose route stays until the
# hub's poll sees the stop) while the save runs: this tells them the server is stopping, not lost, so that they
# wait for the stop's notice rather than ask to restart the server.
STOPPING_EVENT = "https://events.fracnb.io/fracnb_meter/stopping/v1"
STOPPING_SCHEMA = {
    "$id": STOPPING_EVENT,
    "version": "1",
    "title": "fracnb server stopping",
    "description": "This server got SIGTERM and saves its idle kernels' variables before it stops.",
    "type": "object",
    "required": ["saving_seconds"],
    "properties": {"saving_seconds": {"type": "integer", "description": "The save's time limit, in seconds."}},
}
# Why the hub asks, as it says in the request's query (``?stop=``): a stop on request, or the cull's reason; the
# usage document's ``hibernation_stop`` passes it on to the pages.
# Kueue's stop is none the hub asks with: the server saves at it on its own (atstop.py), and tells its pages.
KUEUE_STOP = "kueue"
STOP_REASONS = tuple(r for r in load(USAGE)["properties"]["hibernation_stop"]["enum"] if r not in (None, KUEUE_STOP))
NOTICE_WAIT_S = 3.0  # the pages poll every second by default (the settings' refreshRate)
POLLING_RECENTLY_S = 10.0  # a page that asked within this long is polling
# The stop follows the answer within seconds; a server still running this long after is not being
# stopped for it, and its notice would mislead.
KEPT_S = 120.0


def stop_follows(report: dict[str, Any], stop: str | None) -> bool:
    """Whether a stop follows this hibernation: the hub's fracnb service calls off a GPU-unused stop whose
    hibernation found a kernel busy (fracnb_spawner.hibernation.culled.spares_server; both are held to
    test-data/called-off-stops.json). A called-off one is no notice for the pages, and no save for the
    hub's next stop to take as already made."""
    return not (stop == "gpu-unused" and any(kernel.get("status") == "busy" for kernel in report.get("kernels", [])))


class LastHibernation:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._report: tuple[float, dict[str, Any]] | None = None
        self._stop: str | None = None
        self._stop_notice: str | None = None
        self._clock = clock
        self._last_poll: float | None = None
        self._read = asyncio.Event()

    @property
    def report(self) -> dict[str, Any] | None:
        """The last hibernation's report, for KEPT_S after it."""
        if self._report is None or self._clock() - self._report[0] > KEPT_S:
            return None
        return self._report[1]

    @property
    def stop(self) -> str | None:
        """Why the stop that asked for the kept report is made (:data:`STOP_REASONS`), while it is kept."""
        return self._stop if self.report is not None else None

    @property
    def stop_notice(self) -> str | None:
        """The notice of that stop from the hub's fracnb service (a stop Kueue made), while the report is kept."""
        return self._stop_notice if self.report is not None else None

    def keep(self, report: dict[str, Any], stop: str | None = None, stop_notice: str | None = None) -> None:
        self._report, self._stop, self._stop_notice = (self._clock(), report), stop, stop_notice
        self._read = asyncio.Event()

    def served(self, *, with_report: bool) -> None:
        """A page got the usage document (``with_report``: one that carries the kept report)."""
        self._last_poll = self._clock()
        if with_report and self.report is not None:
            self._read.set()

    def polling(self) -> bool:
        return self._last_poll is not None and self._clock() - self._last_poll <= POLLING_RECENTLY_S

    async def wait_for_page(self, limit: float) -> bool:
        """Wait until a polling page has read the kept report, at most ``limit`` seconds; True if it did."""
        if not self.polling() or limit <= 0:
            return False
        try:
            await asyncio.wait_for(self._read.wait(), timeout=limit)
        except asyncio.TimeoutError:
            return False
        return True
