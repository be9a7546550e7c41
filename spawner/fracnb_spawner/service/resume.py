"""Queued spawns a restarted hub forgot, started again through the hub's REST API.

JupyterHub keeps no spawn across its own restart: a server that was waiting in the GPU queue
when the hub stopped is forgotten (``FractionalSpawner.poll`` says "not running" for its gated
pod, so the hub forgets it without stopping it), while the pod keeps its place in the cluster.
The service, which the restarted hub starts again too, finds such kept places (gated pods whose
server the hub no longer lists) and asks the hub to start each server again with its stored
options (``POST /users/{user}/servers/{server}`` with no body: the hub uses the options of the
server's last start). The new spawn takes over the pod's place: same enqueue time, same
priority (:meth:`fracnb_spawner.queue.coordinator.QueueCoordinator._adopt`), and the hub lifts
its gate when its turn comes. Until then the hub's queue holds each kept place in the order, so
nobody who arrives after the restart goes first. With the kueue engine the pod waits on Kueue's gate
instead, and the new spawn takes the pod itself over (its Workload is its place in Kueue's queue).
See docs/queue.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any
from urllib.parse import quote

from tornado.httpclient import HTTPClientError

from fracnb_spawner.common.podkeys import SERVERNAME_ANNOTATION, USERNAME_ANNOTATION, is_waiting
from fracnb_spawner.queue.order import queue_order, wait_deadline, waiting_from_pod
from fracnb_spawner.service.hubapi import HubAPI

log = logging.getLogger("fracnb.service")

CONCURRENCY = 50  # starts asked of the hub at once: each answers after up to 10 s (slow_spawn_timeout)
# Answers after which the next pass tries again: the hub's limit of concurrent spawns, or the hub
# still checking the server it had on record when it restarted.
TRY_AGAIN = (429, 400)


@dataclass(frozen=True)
class KeptPlace:
    """A gated pod and the hub server it belongs to."""

    user: str
    server: str
    pod: str  # "namespace/name"


@dataclass
class ResumeReport:
    resumed: list[KeptPlace] = field(default_factory=list)
    deferred: list[KeptPlace] = field(default_factory=list)  # the hub said "not now"; the next pass tries again
    failed: int = 0


def kept_places(pods: Iterable[Mapping[str, Any]], now: datetime) -> list[KeptPlace]:
    """Gated pods of hub servers still within their maximum wait, in queue order (priority, then first come)."""
    waiting = {}
    for pod in pods:
        if not is_waiting(pod):
            continue
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        user = annotations.get(USERNAME_ANNOTATION)
        deadline = wait_deadline(pod)
        place = waiting_from_pod(pod, Fraction(0))
        if not user or place is None or (deadline is not None and deadline <= now):
            continue
        waiting[place.key] = (place, KeptPlace(user, annotations.get(SERVERNAME_ANNOTATION, ""), place.key))
    return [waiting[w.key][1] for w in queue_order(w for w, _ in waiting.values())]


def server_path(user: str, server: str) -> str:
    name = quote(user, safe="")
    return f"users/{name}/servers/{quote(server, safe='')}" if server else f"users/{name}/server"


async def resume_pass(hub: HubAPI, pods: Iterable[Mapping[str, Any]], now: datetime) -> ResumeReport:
    """Ask the hub to start again every server whose pod waits in the queue but which the hub does not list."""
    report = ResumeReport()
    places = kept_places(pods, now)
    if not places:
        return report
    models: dict[str, Any] = {}
    for user in sorted({place.user for place in places}):
        try:
            models[user] = await hub.user(user)
        except HTTPClientError as error:
            if error.code != 404:  # a deleted user: the place ends at its maximum wait
                raise
    forgotten = [p for p in places if p.user in models and p.server not in (models[p.user].get("servers") or {})]
    slots = asyncio.Semaphore(CONCURRENCY)

    async def start(place: KeptPlace) -> None:
        async with slots:
            try:
                code, _ = await hub.request("POST", server_path(place.user, place.server))
            except HTTPClientError as error:
                if error.code in TRY_AGAIN:
                    report.deferred.append(place)
                    return
                log.warning("Could not resume the queued spawn of %s/%s: %s", place.user, place.server, error)
                report.failed += 1
                return
            except Exception:
                log.exception("Could not resume the queued spawn of %s/%s", place.user, place.server)
                report.failed += 1
                return
        log.info("Resumed the queued spawn of %s/%s (its pod %s kept its place; HTTP %s)", *_names(place), code)
        report.resumed.append(place)

    await asyncio.gather(*(start(place) for place in forgotten))
    return report


def _names(place: KeptPlace) -> tuple[str, str, str]:
    return place.user, place.server, place.pod
