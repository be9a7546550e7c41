"""``GET api/queue``: the spawns waiting for a GPU slot, for hub admins only."""

from __future__ import annotations

import json

from tornado import web

from fracnb_spawner.queue.demand import queue_entries
from fracnb_spawner.service.api.base import ServiceHandler


class QueueHandler(ServiceHandler):
    """``GET api/queue``: the spawns waiting for a GPU slot, for hub admins only."""

    @web.authenticated
    async def get(self) -> None:
        model = self.current_user
        if model.get("kind", "user") != "user" or not model.get("admin"):
            raise web.HTTPError(403, "only hub admins may read the queue")
        pods = await self.state.pods.list_pods()
        now = self.state.clock()
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps({"queue": [entry.as_json(now) for entry in queue_entries(pods)]}))
