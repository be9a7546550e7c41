"""The server's last hibernation, kept for the stopped-server notice.

The hub's fracnb service stops the server right after the hibernation answers, so the JupyterLab
page that will say "Variables of train.ipynb saved at 14:05 ..." must have read the report before:
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

NOTICE_WAIT_S = 3.0  # the pages poll every second by default (the settings' refreshRate)
POLLING_RECENTLY_S = 10.0  # a page that asked within this long is polling
# The stop follows the answer within seconds; a server still running this long after is not being
# stopped for it (a GPU-unused stop called off because a kernel turned busy), and its notice would mislead.
KEPT_S = 120.0


class LastHibernation:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._report: tuple[float, dict[str, Any]] | None = None
        self._clock = clock
        self._last_poll: float | None = None
        self._read = asyncio.Event()

    @property
    def report(self) -> dict[str, Any] | None:
        """The last hibernation's report, for KEPT_S after it."""
        if self._report is None or self._clock() - self._report[0] > KEPT_S:
            return None
        return self._report[1]

    def keep(self, report: dict[str, Any]) -> None:
        self._report = (self._clock(), report)
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
