"""The save at a server's stop, where the hub asked for it (``FRACNB_STOP_HIBERNATION_TIMEOUT``).

Kueue preempts a notebook by deleting its pod: SIGTERM, and the pod's grace period, are its only warning.
jupyter_server stops its extensions before its kernels, so the meter's stop saves every idle kernel's variables
as a hibernation does (a kernel that ran no cell since the hub's own save before a stop is not saved twice), and
posts what it saved to the hub's fracnb service (``POST api/stop-saves``, stop-save.schema.json), whose notice of
the stop counts it: the hub's last look at the pod came before this save. The service answers with that notice
(stop-save-answer.schema.json) when Kueue made the stop, and the open pages get it (``tell``): the hub's poll has
not seen the stop yet, so they would otherwise know neither why the server stopped nor what was saved.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fracnb_schemas import STOP_SAVE_ANSWER, SchemaMismatchError, check

from ..contract import stop_hibernation_timeout
from ..hubcalls import JsonPoster, service_endpoint

Hibernate = Callable[[float], Awaitable[dict[str, Any]]]  # timeout in seconds -> hibernation report
Tell = Callable[[dict[str, Any], str], None]  # the report and the service's notice of the stop -> the open pages


def stop_notice(answer: bytes | None) -> str | None:
    """The notice in the service's answer (stop-save-answer.schema.json); None for none or an answer of another
    shape (an older service answered 204)."""
    try:
        document = json.loads(answer or b"null")
        check(STOP_SAVE_ANSWER, document)
    except (ValueError, SchemaMismatchError):
        return None
    return document["notice"]


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

    async def run(self, hibernate: Hibernate, tell: Tell, log: logging.Logger) -> dict[str, Any] | None:
        """Save and tell the service, saying so in ``log`` (the server's), and ``tell`` the open pages the service's
        notice of the stop, if it has one; the report, or None when not asked or the save failed. Never raises."""
        if self.timeout <= 0:
            return None
        try:
            report = await hibernate(self.timeout)
        except Exception:
            log.exception("fracnb_meter: could not save the kernels' variables at the stop")
            return None
        kernels = ", ".join(f"{k['path'] or k['kernel_id']}: {k['status']}" for k in report["kernels"]) or "no kernels"
        log.info("fracnb_meter: variables saved at the stop in %.1f s (%s)", report["seconds"], kernels)
        answer = await self._poster.post_for_answer({"server_name": self._server_name, "hibernation": report})
        notice = stop_notice(answer)
        if notice is not None:
            log.info("fracnb_meter: the stop's notice for the open pages: %s", notice)
            tell(report, notice)
        return report
