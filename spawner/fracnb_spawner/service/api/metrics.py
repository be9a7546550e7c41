"""``GET metrics``: the service's Prometheus metrics (service/metrics.py), for a hub token with access."""

from __future__ import annotations

from tornado import web

from fracnb_spawner.service.api.base import ServiceHandler
from fracnb_spawner.service.metrics import CONTENT_TYPE


class MetricsHandler(ServiceHandler):
    @web.authenticated
    def get(self) -> None:
        self.set_header("Content-Type", CONTENT_TYPE)
        self.finish(self.state.metrics.exposition())
