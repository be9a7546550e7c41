"""ResourceSlices and allocated ResourceClaims of the whole cluster, kept current by one watch each.

Started when a spawn form first shows a ``dra`` choice (:class:`.watches.ClusterWatches`); hubs
without DRA choices never watch them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from fracnb_spawner.cluster.devices import trim_claim, trim_slice
from fracnb_spawner.cluster.view import FIRST_LOAD_WAIT, Mirror

default_log = logging.getLogger("fracnb.dra")


class DraView:
    """ResourceSlices and allocated ResourceClaims of the whole cluster, kept current by watches."""

    def __init__(self, api_client: Any, log: logging.Logger | logging.LoggerAdapter = default_log) -> None:
        from kubernetes_asyncio.client import ResourceV1Api  # noqa: PLC0415 - only hubs with dra choices

        api = ResourceV1Api(api_client)
        self.changed = asyncio.Event()  # either kind changed: the GPU queue waits on it
        self.slices = Mirror("resourceslices", api.list_resource_slice, trim_slice, log=log, changed=self.changed)
        self.claims = Mirror(
            "resourceclaims", api.list_resource_claim_for_all_namespaces, trim_claim, log=log, changed=self.changed
        )
        self.tasks = [asyncio.ensure_future(mirror.run()) for mirror in (self.slices, self.claims)]

    async def snapshot(self, wait: float = FIRST_LOAD_WAIT) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Slices and allocated claims now; empty while either cannot be read."""
        mirrors = (self.slices, self.claims)
        if not all(m.settled.is_set() for m in mirrors):
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(m.settled.wait() for m in mirrors)), wait)
        if not all(m.loaded.is_set() for m in mirrors):
            return [], []
        return self.slices.objects(), self.claims.objects()

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
