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

A server that cannot answer (hung, or its process gone) is not waited for: the first request, for its
usage document, has ``c.FractionalSpawner.hibernate_on_stop_answer_timeout`` (5 s) to be answered;
without an answer the stop goes on at once and its record says that nothing could be saved.

Each such stop leaves its record (history/hubstopnotices.py), as the service's culls do: the user's pages
then tell the newest stop, what it saved or that nothing was saved, never an older cull's notice.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from enum import Enum
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from fracnb_spawner.hibernation.client import Hibernation, ask_to_hibernate
from fracnb_spawner.hibernation.culled import metric_outcome, outcome_text
from fracnb_spawner.hibernation.settings import HibernationSettings, settings_from_config

# reader=hub: the meter does not take this read for a page polling (a hibernation's answer would wait for it).
USAGE_ENDPOINT = "fracnb/api/usage?reader=hub"
ON_REQUEST = "user"  # the stop's reason the meter is told, as the stop records it (history.stopnotices.USER_STOP)


class Answer(Enum):
    """What the server's usage document said before the hibernation request."""

    NONE = "no answer"  # not within the bound: the server is hung or gone
    HIBERNATED = "hibernated"  # the document carries a hibernation (the service's, seconds ago)
    READY = "ready"  # any other answer: ask


async def first_answer(url: str, token: str, timeout: float) -> Answer:
    """Whether the server answers its usage document within ``timeout`` seconds, and whether it says that
    it has just hibernated. An error status is an answer (a server without the meter answers 404)."""
    request = HTTPRequest(
        url.rstrip("/") + "/" + USAGE_ENDPOINT,
        headers={"Authorization": f"token {token}"},
        connect_timeout=timeout,
        request_timeout=timeout,
    )
    try:
        answer = await AsyncHTTPClient().fetch(request)
    except HTTPClientError as error:
        return Answer.NONE if error.code == 599 else Answer.READY  # 599: tornado's own timeout
    except OSError:
        return Answer.NONE  # refused or unreachable
    try:
        hibernated = json.loads(answer.body).get("hibernation") is not None
    except (ValueError, AttributeError):
        hibernated = False
    return Answer.HIBERNATED if hibernated else Answer.READY


def no_answer(timeout: float, waited: float) -> Hibernation:
    """The record of a server that did not answer the first request within ``timeout`` seconds (it waited
    ``waited``: a refused connection is told at once): nothing was saved, and why."""
    return Hibernation(None, f"the server did not answer within {timeout:g} s", waited)


def may_hold_kernels(pod: Mapping[str, Any] | None) -> bool:
    """Whether a stop should ask the server of ``pod`` (the hub's watched copy) to save: its pod runs, with
    an address. A pod still queued, being placed or starting holds no kernels, and the server's address
    would be the hub's placeholder, not the pod's. Without a copy (the hub not watching pods yet), ask:
    the first request is bounded."""
    if pod is None:
        return True
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and bool(status.get("podIP"))


async def hibernate_before_user_stop(spawner: Any) -> Hibernation | None:
    """Ask a running GPU server of ``spawner`` (a FractionalSpawner) to save its idle kernels before the hub
    stops it; None when not asked. The hub's config (``spawner.config``) has the service's bound."""
    plan, server, token = spawner.spawn_plan, spawner.server, spawner.api_token
    if not (spawner.hibernate_on_stop and plan is not None and plan.fraction > 0 and server is not None and token):
        return None
    url, name = server.url, spawner._log_name
    settings: HibernationSettings = settings_from_config(spawner.config.FracnbService)
    if not settings.enabled:
        return None
    answer_timeout, began = spawner.hibernate_on_stop_answer_timeout, time.monotonic()
    answer = await first_answer(url, token, answer_timeout)
    if answer is Answer.HIBERNATED:
        return None
    if answer is Answer.NONE:
        hibernation = no_answer(answer_timeout, time.monotonic() - began)
    else:
        hibernation = await ask_to_hibernate(url, token, settings, stop=ON_REQUEST)
    spawner.log.log(
        logging.WARNING if metric_outcome(hibernation) == "failed" else logging.INFO,
        "fracnb: hibernation of %s before its stop: %s in %.1fs",
        name,
        outcome_text(hibernation),
        hibernation.seconds,
    )
    return hibernation
