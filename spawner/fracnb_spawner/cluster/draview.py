"""ResourceSlices and allocated ResourceClaims of the whole cluster, kept current by one watch each (and the
unallocated claims of pods that ask whole devices: what waits for whole cards, for placement).

Started when a spawn form first shows a ``dra`` choice (:class:`.watches.ClusterWatches`); hubs
without DRA choices never watch them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fracnb_spawner.cluster.devices import trim_slice, trim_viewed_claim
from fracnb_spawner.cluster.view import Mirror, MirrorPair

default_log = logging.getLogger("fracnb.dra")


class DraView(MirrorPair):
    """ResourceSlices and allocated ResourceClaims of the whole cluster, kept current by watches."""

    def __init__(self, api_client: Any, log: logging.Logger | logging.LoggerAdapter = default_log) -> None:
        from kubernetes_asyncio.client import ResourceV1Api  # noqa: PLC0415 - only hubs with dra choices

        api = ResourceV1Api(api_client)
        changed = asyncio.Event()
        self.slices = Mirror("resourceslices", api.list_resource_slice, trim_slice, log=log, changed=changed)
        self.claims = Mirror(
            "resourceclaims", api.list_resource_claim_for_all_namespaces, trim_viewed_claim, log=log, changed=changed
        )
        super().__init__(self.slices, self.claims, changed)
