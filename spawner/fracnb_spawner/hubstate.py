"""What one hub process shares between its spawners: the cluster watches, the GPU queue, the quota
ledger, the session-history reader, and settings read once per hub configuration.

This is the hub side's only registry. A hub runs one event loop, so it holds one ``HubState``;
it is kept per loop because asyncio's locks, events and tasks belong to the loop that made them,
and a test process runs many loops (one hub each).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from fracnb_spawner.cluster.watches import ClusterWatches
from fracnb_spawner.history.hubstopnotices import HubStops
from fracnb_spawner.history.reading import HistoryReader
from fracnb_spawner.queue.coordinator import QueueCoordinator
from fracnb_spawner.quota.ledger import QuotaLedger

T = TypeVar("T")
Log = logging.Logger | logging.LoggerAdapter


class HubState:
    _by_loop: ClassVar[dict[asyncio.AbstractEventLoop | None, HubState]] = {}

    def __init__(self) -> None:
        self.ledger = QuotaLedger()
        self.history = HistoryReader()
        self.watches: ClusterWatches | None = None
        self.queue: QueueCoordinator | None = None
        self._settings: dict[str, tuple[Any, Any]] = {}
        self.checked_profiles: Any = None  # the configured profile list, checked (choosing.CheckedProfiles)
        self.plans: dict[Any, Any] = {}  # SpawnPlans of choices of the checked profile list (Choosing.plan_for)
        # What the hub did to each server (a user's stop, a spawn left in the queue, a lost node), for the
        # hub's pages. Here, not on the spawner: JupyterHub drops a stopped server's spawner object.
        self.stops = HubStops()

    @classmethod
    def current(cls) -> HubState:
        """The running loop's state, made on first use (outside a loop: one for synchronous callers)."""
        loop = _running_loop()
        state = cls._by_loop.get(loop)
        if state is None:
            cls._by_loop = {known: s for known, s in cls._by_loop.items() if known is None or not known.is_closed()}
            state = cls._by_loop[loop] = HubState()
        return state

    @classmethod
    def running(cls) -> HubState | None:
        """The running loop's state if it exists (none made yet: None)."""
        return cls._by_loop.get(_running_loop())

    def cluster(self, api: Any, log: Log) -> ClusterWatches:
        """The hub-wide watches, started on first use."""
        if self.watches is None:
            self.watches = ClusterWatches(api, log)
        return self.watches

    def gpu_queue(self, api: Any, log: Log) -> QueueCoordinator:
        """The GPU queue, started on first use beside the watches it reads."""
        if self.queue is None:
            self.queue = QueueCoordinator(self.cluster(api, log), api, log)
        return self.queue

    def setting(self, config: Any, name: str, make: Callable[[], T]) -> T:
        """``make()``, once per hub configuration object (a hub restart reads its new config again)."""
        cached = self._settings.get(name)
        if cached is None or cached[0] is not config:
            cached = self._settings[name] = (config, make())
        return cached[1]

    async def stop(self) -> None:
        """Stop the queue, then the watches it reads."""
        queue, watches, self.queue, self.watches = self.queue, self.watches, None, None
        if queue is not None:
            await queue.stop()
        if watches is not None:
            await watches.stop()

    @classmethod
    async def discard(cls) -> None:
        """Stop and forget the running loop's state, as a hub process ending does (tests, benchmarks)."""
        state = cls._by_loop.pop(asyncio.get_running_loop(), None)
        if state is not None:
            await state.stop()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
