"""The notebooks' live busy state on their pods, for the hub's placement: ``fracnb.io/busy-since``.

Each session report (``api/sessions``, every ``FracnbService.session_report_interval``) says how many of the
server's kernels ran a cell at the meter's latest reading (``gpu_unused.busy_kernels``). While the reports of a
session say one does, the server's pod carries ``fracnb.io/busy-since``: when the first report of this busy
stretch saw it (the meter's reading, on the service's clock; RFC 3339, UTC). A report with no kernel busy, or
without the field (a meter that counts no GPU-unused time: ``FracnbMeter.gpu_unused_interval = 0``, a CPU-only
server), removes it. The pod is patched only when that changes, never per report. Reports are snapshots a report
interval apart: "busy since" means busy at every report since. The hub's placement reads the annotation
(:func:`fracnb_spawner.placement.decide.busy_now`): a holder busy that long counts as busy now.

The pod is found by KubeSpawner's annotations in one LIST of the singleuser pods (which also says what the pods
carry); later changes go straight to it. A new session is a new server: its pod is looked up again. After a
restart of the service a busy stretch starts again at the next report (the service keeps no state). Patching needs
``patch`` on pods in the servers' namespace (helm-values/rbac.yaml): a refused or failed patch is logged once per
server, never fails the report, and is tried again at the server's next report that still wants it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fracnb_spawner.common.logsafe import server_shown
from fracnb_spawner.common.podkeys import BUSY_SINCE_ANNOTATION, SERVERNAME_ANNOTATION, USERNAME_ANNOTATION
from fracnb_spawner.culling import isoformat
from fracnb_spawner.gpu.companions import MERGE_PATCH
from fracnb_spawner.service.meterfacts import unused_of
from fracnb_spawner.service.pods import PodSource

Who = tuple[str, str]  # (user, server name)
WRITE_TIMEOUT = 10.0  # seconds a report waits for its pod's LIST and patch at most
log = logging.getLogger("fracnb.service")


# ---- what the pod should carry (pure) -------------------------------------------------------------


@dataclass(frozen=True)
class Stretch:
    """A session's busy stretch: since when its reports have said a kernel is busy; None while none is."""

    session_id: str
    since: datetime | None


def next_stretch(before: Stretch | None, report: Mapping[str, Any], received_at: datetime) -> Stretch:
    """The stretch after a session report (session-report.schema.json) that arrived at ``received_at``: a busy
    report continues a busy stretch of the same session, or starts one at its reading; any other ends it."""
    unused = unused_of(report, received_at)
    session = report["session_id"]
    if unused is None or unused.busy_kernels <= 0:
        return Stretch(session, None)
    if before is not None and before.session_id == session and before.since is not None:
        return before
    return Stretch(session, unused.measured_at)


def mark_text(since: datetime | None) -> str | None:
    """The annotation's value: ``2026-12-01T10:55:00Z``; None: no annotation."""
    return isoformat(since.replace(microsecond=0)) if since is not None else None


def mark_patch(value: str | None) -> dict[str, Any]:
    """A merge patch that sets (or, with None, removes) the annotation and leaves the pod's others alone."""
    return {"metadata": {"annotations": {BUSY_SINCE_ANNOTATION: value}}}


@dataclass
class PodMark:
    """Where a server's pod is, and what it carries as last seen or written."""

    namespace: str
    name: str
    value: str | None


def pod_marks(pods: list[Mapping[str, Any]]) -> dict[Who, PodMark]:
    """The servers' pods (KubeSpawner's annotations), those being deleted left out."""
    found = {}
    for pod in pods:
        metadata = pod.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        user = annotations.get(USERNAME_ANNOTATION)
        if user and not metadata.get("deletionTimestamp"):
            who = (user, annotations.get(SERVERNAME_ANNOTATION, ""))
            found[who] = PodMark(
                metadata.get("namespace", ""), metadata.get("name", ""), annotations.get(BUSY_SINCE_ANNOTATION)
            )
    return found


def failure_text(error: Exception) -> str:
    """A failed LIST or patch in words, naming the missing rule when RBAC refused it."""
    status = getattr(error, "status", None)
    if status == 403:
        return "403 Forbidden (the hub's service account needs patch on pods: helm-values/rbac.yaml)"
    return f"{status} {getattr(error, 'reason', '') or ''}".strip() if status else repr(error)


# ---- writing it (I/O) -----------------------------------------------------------------------------


class BusyMarks:
    """Keeps each reporting server's pod's ``fracnb.io/busy-since`` in step with its reports."""

    def __init__(self, pods: PodSource) -> None:
        self.pods = pods
        self.stretches: dict[Who, Stretch] = {}
        self.on_pods: dict[Who, PodMark] = {}
        self._api: Any = None
        self._listing = asyncio.Lock()  # one LIST for the servers whose pods are not known yet
        self._warned: set[Who] = set()
        self._podless: set[Who] = set()  # reporting servers without a pod in the LIST (not this hub's pods)

    async def note(self, who: Who, report: Mapping[str, Any], received_at: datetime) -> None:
        """A session report arrived: mark or unmark the server's pod where its busy state changed. The last
        report of a session (``ended_at``) forgets the server: its pod goes."""
        if report.get("ended_at"):
            self.forget(who)
            return
        before = self.stretches.get(who)
        if before is not None and before.session_id != report["session_id"]:
            self.on_pods.pop(who, None)  # a new session of the server: its pod may be another
            self._podless.discard(who)
        stretch = self.stretches[who] = next_stretch(before, report, received_at)
        try:
            await asyncio.wait_for(self._write(who, mark_text(stretch.since)), WRITE_TIMEOUT)
        except Exception as error:  # the report is stored all the same; the next change tries again
            if getattr(error, "status", None) == 404:
                self.on_pods.pop(who, None)  # the pod went: the next report looks it up again
            if who not in self._warned:
                self._warned.add(who)
                log.warning("Could not mark %s busy or idle on its pod: %s", server_shown(*who), failure_text(error))

    def forget(self, who: Who) -> None:
        self.stretches.pop(who, None)
        self.on_pods.pop(who, None)
        self._warned.discard(who)
        self._podless.discard(who)

    async def _write(self, who: Who, wanted: str | None) -> None:
        if who in self._podless:
            return
        mark = self.on_pods.get(who) or await self._locate(who)
        if mark is None:
            self._podless.add(who)  # a session's reports come from its running pod: none will appear later
            return
        if mark.value == wanted:
            return
        api = await self._core_api()
        if api is None:
            return
        await api.patch_namespaced_pod(mark.name, mark.namespace, mark_patch(wanted), _content_type=MERGE_PATCH)
        mark.value = wanted
        self._warned.discard(who)

    async def _locate(self, who: Who) -> PodMark | None:
        async with self._listing:
            if who not in self.on_pods:  # else found by a LIST another report made meanwhile
                listed = pod_marks(list(await self.pods.list_pods()))
                self.on_pods.update({other: mark for other, mark in listed.items() if other not in self.on_pods})
        return self.on_pods.get(who)

    async def _core_api(self) -> Any:
        """A ``CoreV1Api`` on the pod source's client; None for a source without one (nothing is marked)."""
        if self._api is None:
            client_of = getattr(self.pods, "api_client", None)
            if client_of is None:
                return None
            from kubernetes_asyncio.client import CoreV1Api  # noqa: PLC0415 -- hub extra only

            self._api = CoreV1Api(await client_of())
        return self._api
