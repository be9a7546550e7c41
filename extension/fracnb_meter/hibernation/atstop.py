"""The save at a server's stop, where the hub asked for it (``FRACNB_STOP_HIBERNATION_TIMEOUT``).

Kueue preempts a notebook by deleting its pod: SIGTERM, and the pod's grace period, are its only warning.
jupyter_server stops its extensions before its kernels, so the meter's stop saves every idle kernel's variables
as a hibernation does (a kernel that ran no cell since the hub's own save before a stop is not saved twice), and
posts what it saved to the hub's fracnb service (``POST api/stop-saves``, stop-save.schema.json), whose notice of
the stop counts it: the hub's last look at the pod came before this save.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..contract import stop_hibernation_timeout
from ..hubcalls import JsonPoster, service_endpoint

Hibernate = Callable[[float], Awaitable[dict[str, Any]]]  # timeout in seconds -> hibernation report


class SaveAtStop:
    """What the hub asked of this server's stop (``timeout``: 0, nothing), and where to tell what it saved."""

    def __init__(self, timeout: int, poster: JsonPoster, server_name: str) -> None:
        self.timeout = timeout
        self._poster = poster
        self._server_name = server_name

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> SaveAtStop:
        token = env.get("JUPYTERHUB_API_TOKEN", "")
        url = service_endpoint(env.get("FRACNB_SERVICE_URL", ""), "api/stop-saves") if token else ""
        poster = JsonPoster(url, token, what="tell the fracnb service what was saved at the stop")
        return cls(stop_hibernation_timeout(env), poster, env.get("JUPYTERHUB_SERVER_NAME", ""))

    async def run(self, hibernate: Hibernate, log: logging.Logger) -> dict[str, Any] | None:
        """Save and tell, saying so in ``log`` (the server's); the report, or None when not asked or the save
        failed. Never raises."""
        if self.timeout <= 0:
            return None
        try:
            report = await hibernate(self.timeout)
        except Exception:
            log.exception("fracnb_meter: could not save the kernels' variables at the stop")
            return None
        kernels = ", ".join(f"{k['path'] or k['kernel_id']}: {k['status']}" for k in report["kernels"]) or "no kernels"
        log.info("fracnb_meter: variables saved at the stop in %.1f s (%s)", report["seconds"], kernels)
        await self._poster.post({"server_name": self._server_name, "hibernation": report})
        return report
