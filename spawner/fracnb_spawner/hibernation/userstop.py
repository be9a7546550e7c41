"""Hibernation at a stop someone asks for ("Stop My Server", an admin's stop), where the admin turns it on
(``c.FractionalSpawner.hibernate_on_stop``).

Such a stop reaches no fracnb code but FractionalSpawner's ``stop``, in the hub: the seam for it. The
hub holds the server's own token there (``access:servers`` on exactly that server) and its address.
The bound is the service's ``c.FracnbService.hibernation_timeout``, read from the same config. The
hub answers the user's stop request after its ``slow_stop_timeout`` (10 s) with "stopping", and the
stop goes on until the save is done or its time is up.

A stop the fracnb service makes (a cull) also ends here; the service has then just asked for the
hibernation itself, which the notebook's usage document says (``hibernation``, kept for two
minutes): it is not asked twice.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from fracnb_spawner.hibernation.client import Hibernation, ask_to_hibernate
from fracnb_spawner.hibernation.culled import metric_outcome
from fracnb_spawner.hibernation.settings import HibernationSettings, settings_from_config

log = logging.getLogger("fracnb")
USAGE_ENDPOINT = "fracnb/api/usage"


async def hibernated_just_now(url: str, token: str) -> bool:
    """Whether the server's usage document carries a hibernation (the service's, seconds ago)."""
    request = HTTPRequest(
        url.rstrip("/") + "/" + USAGE_ENDPOINT, headers={"Authorization": f"token {token}"}, request_timeout=10
    )
    try:
        answer = await AsyncHTTPClient().fetch(request)
        return json.loads(answer.body).get("hibernation") is not None
    except (HTTPClientError, OSError, ValueError, AttributeError):
        return False


async def hibernate_before_user_stop(spawner: Any) -> Hibernation | None:
    """Ask a running GPU server of ``spawner`` (a FractionalSpawner) to save its idle kernels before the hub
    stops it; None when not asked. The hub's config (``spawner.config``) has the service's bound."""
    plan, server, token = spawner.spawn_plan, spawner.server, spawner.api_token
    if not (spawner.hibernate_on_stop and plan is not None and plan.fraction > 0 and server is not None and token):
        return None
    url, name = server.url, spawner._log_name
    settings: HibernationSettings = settings_from_config(spawner.config.FracnbService)
    if not settings.enabled or await hibernated_just_now(url, token):
        return None
    hibernation = await ask_to_hibernate(url, token, settings)
    log.info(
        "fracnb: hibernation of %s before its stop: %s in %.1fs",
        name,
        metric_outcome(hibernation) or hibernation.problem or "nothing to save",
        hibernation.seconds,
    )
    return hibernation
