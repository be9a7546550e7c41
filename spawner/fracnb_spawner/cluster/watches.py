"""The hub-wide watches of the cluster, read as one :class:`~.slots.Cluster` by the form and the queue.

Nodes and GPU-holding pods are watched from the first use; ResourceSlices and allocated claims
only once a ``dra`` choice needs them.
"""

from __future__ import annotations

import logging
from typing import Any

from fracnb_spawner.cluster.draview import DraView
from fracnb_spawner.cluster.slots import Cluster
from fracnb_spawner.cluster.view import ClusterView

default_log = logging.getLogger("fracnb.cluster")


class ClusterWatches:
    """One hub process's view of nodes and pods, and of DRA devices when asked for."""

    def __init__(self, api: Any, log: logging.Logger | logging.LoggerAdapter = default_log) -> None:
        self.api, self.log = api, log
        self.view = ClusterView(api, log)
        self.devices: DraView | None = None

    def device_view(self) -> DraView:
        """The watches of ResourceSlices and claims, started on first use."""
        if self.devices is None:
            self.devices = DraView(self.api.api_client, self.log)
        return self.devices

    async def read(self, *, devices: bool, wait: bool) -> Cluster | None:
        """Nodes and pods, and with ``devices`` ResourceSlices and allocated claims; None while they cannot
        be read. ``wait``: for the first LIST."""
        nodes, pods = await (self.view.snapshot() if wait else self.view.snapshot(wait=0))
        if not nodes:
            return None
        if not devices:
            return Cluster(nodes, pods)
        view = self.device_view()
        slices, claims = await (view.snapshot() if wait else view.snapshot(wait=0))
        return Cluster(nodes, pods, slices, claims) if slices else None

    async def stop(self) -> None:
        await self.view.stop()
        if self.devices is not None:
            await self.devices.stop()
