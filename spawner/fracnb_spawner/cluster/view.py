"""One hub-wide view of nodes and GPU-holding pods for the spawn form, kept current by watches.

Every load of the spawn form used to LIST every node and pod of the cluster. Now the first load
starts one view per hub process: it LISTs nodes and live pods once, then WATCHes each from the
listed ``resourceVersion`` (with bookmarks, so reconnecting when the server ends a watch needs no
new LIST). It LISTs again only when that version has expired (410 Gone) or the connection failed.
Form loads read memory: however many users reload the form, the apiserver sees one watch per kind.

What it keeps is what :func:`availability.free_units` reads: node names, labels, schedulability
and allocatable; and, of pods bound to a node, the extended-resource (GPU) requests and limits.
Pods without any (most of a cluster) are not kept.

Without RBAC to list and watch nodes and pods cluster-wide the view stays empty (the form shows
no free counts), says so once in the hub log, and tries again every few minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from fracnb_spawner.common.podkeys import (
    BUSY_SINCE_ANNOTATION,
    FRACTION_ANNOTATION,
    GPU_MEMORY_ANNOTATION,
    IDLE_TIMEOUT_ANNOTATION,
    IDLE_TIMEOUT_UNDER_DEMAND_ANNOTATION,
    KUEUE_QUEUE_LABEL,
    MAX_AGE_ANNOTATION,
    MAX_WAIT_ANNOTATION,
    PRIORITY_ANNOTATION,
    QUEUED_AT_ANNOTATION,
    SERVERNAME_ANNOTATION,
    SLOT_KIND_LABEL,
    USERNAME_ANNOTATION,
)
from fracnb_spawner.gpu.backends import WHOLE_GPU_RESOURCE

Trim = Callable[[Mapping[str, Any]], "dict[str, Any] | None"]

LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
WATCH_SECONDS = 300  # the server ends each watch after this; the view resumes from its last version
LIST_TIMEOUT = 60
FIRST_LOAD_WAIT = 10.0  # how long the first form load waits for the first LIST
RETRY_SECONDS = (1, 2, 5, 10, 30, 60, 120, 300)  # back-off after refusals (RBAC); the last one repeats
OUTAGE_RETRY_SECONDS = 10  # the longest wait after any other failure: an apiserver restarting is back soon

default_log = logging.getLogger("fracnb.clusterview")
# What the queue reads of fracnb's GPU pods: who holds how much, and each queued spawn's place.
QUEUE_READS = (
    FRACTION_ANNOTATION, USERNAME_ANNOTATION, SERVERNAME_ANNOTATION,
    QUEUED_AT_ANNOTATION, PRIORITY_ANNOTATION, MAX_WAIT_ANNOTATION, IDLE_TIMEOUT_ANNOTATION, MAX_AGE_ANNOTATION,
    IDLE_TIMEOUT_UNDER_DEMAND_ANNOTATION, GPU_MEMORY_ANNOTATION,
)  # fmt: skip
# What placement reads of them besides: since when a kernel of the server has been busy (the fracnb service's).
PLACEMENT_READS = (BUSY_SINCE_ANNOTATION,)


# ---- what is kept (pure) -------------------------------------------------------------------------


def trim_node(node: Mapping[str, Any]) -> dict[str, Any]:
    """A node as :func:`availability.free_units` reads it."""
    metadata = node.get("metadata") or {}
    return {
        "metadata": {"name": metadata.get("name", ""), "labels": dict(metadata.get("labels") or {})},
        "spec": {"unschedulable": bool((node.get("spec") or {}).get("unschedulable"))},
        "status": {"allocatable": dict((node.get("status") or {}).get("allocatable") or {})},
    }


def _extended(amounts: Mapping[str, Any] | None) -> dict[str, Any]:
    # Extended resources (GPUs, MIG slices, shared replicas) carry a domain: "nvidia.com/gpu".
    return {name: amount for name, amount in (amounts or {}).items() if "/" in name}


def _asks(spec: Mapping[str, Any], resource: str) -> bool:
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        if resource in (resources.get("requests") or {}) or resource in (resources.get("limits") or {}):
            return True
    return False


def trim_pod(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """A pod reduced to its extended-resource requests; None if it holds none.

    Pods bound to a node count against its capacity. Of unbound pods fracnb's own GPU pods
    (those with a slot kind) are kept, with what the queue reads: a gated one waits in the queue,
    an ungated one is about to take a slot. fracnb's DRA pods (a slot kind, no extended resource:
    their claim holds the GPU) are kept too. Another unbound pod is kept only while it asks for
    whole GPUs (``nvidia.com/gpu``: a batch or lent job waiting for cards, which placement packs for).
    """
    spec = pod.get("spec") or {}
    metadata = pod.get("metadata") or {}
    kind = (metadata.get("labels") or {}).get(SLOT_KIND_LABEL)
    if not spec.get("nodeName") and kind is None and not _asks(spec, WHOLE_GPU_RESOURCE):
        return None
    containers = []
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        requests, limits = _extended(resources.get("requests")), _extended(resources.get("limits"))
        if requests or limits:
            containers.append({"resources": {"requests": requests, "limits": limits}})
    if not containers and kind is None:
        return None  # a DRA pod asks through its claim: kept by its slot kind
    trimmed: dict[str, Any] = {
        "metadata": {"name": metadata.get("name", ""), "namespace": metadata.get("namespace", "")},
        "spec": {"nodeName": spec.get("nodeName"), "containers": containers},
        "status": {"phase": (pod.get("status") or {}).get("phase", "")},
    }
    if isinstance(spec.get("priority"), int):
        trimmed["spec"]["priority"] = spec["priority"]  # a lower one than a notebook's is preemptible
    if kind is not None:
        annotations = metadata.get("annotations") or {}
        labels = metadata.get("labels") or {}
        # The kueue engine's estimate reads whose quota a server holds: its LocalQueue.
        trimmed["metadata"]["labels"] = {k: labels[k] for k in (SLOT_KIND_LABEL, KUEUE_QUEUE_LABEL) if k in labels}
        kept = (*QUEUE_READS, *PLACEMENT_READS)
        trimmed["metadata"]["annotations"] = {k: annotations[k] for k in kept if k in annotations}
        trimmed["spec"]["nodeSelector"] = dict(spec.get("nodeSelector") or {})
        trimmed["spec"]["schedulingGates"] = list(spec.get("schedulingGates") or [])
    return trimmed


def object_key(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def apply_event(items: dict[str, dict[str, Any]], kind: str, obj: Mapping[str, Any], trim: Trim) -> None:
    """Update ``items`` (key -> trimmed object) with one watch event (ADDED, MODIFIED, DELETED)."""
    key = object_key(obj)
    kept = None if kind == "DELETED" else trim(obj)
    if kept is None:
        items.pop(key, None)
    else:
        items[key] = kept


# ---- keeping one kind current (I/O) --------------------------------------------------------------


class WatchExpiredError(Exception):
    """The watch's resourceVersion is gone (410): LIST again."""


class Mirror:
    """The objects of one LIST call, kept current by WATCH on the same call."""

    def __init__(
        self,
        kind: str,
        call: Callable[..., Awaitable[Any]],
        trim: Trim,
        field_selector: str = "",
        *,
        log: logging.Logger | logging.LoggerAdapter = default_log,
        changed: asyncio.Event | None = None,
    ) -> None:
        self.kind, self.call, self.trim, self.field_selector = kind, call, trim, field_selector
        self.changed = changed or asyncio.Event()  # set on every change; the queue waits on it
        self.items: dict[str, dict[str, Any]] = {}
        self.loaded = asyncio.Event()
        self.settled = asyncio.Event()  # the first LIST answered, or failed: the form need wait no longer
        self.failures = 0
        self.log = log

    def objects(self) -> list[dict[str, Any]]:
        return list(self.items.values())

    async def _list(self) -> str:
        response = await self.call(
            field_selector=self.field_selector, _preload_content=False, _request_timeout=LIST_TIMEOUT
        )
        async with response:
            if response.status != 200:
                raise ApiException(status=response.status, reason=(await response.text())[:200])
            data = json.loads(await response.read())
        items: dict[str, dict[str, Any]] = {}
        for obj in data.get("items") or []:
            apply_event(items, "ADDED", obj, self.trim)
        self.items = items  # replaced whole: readers never see half a list
        self.loaded.set()
        self.settled.set()
        self.changed.set()
        return data["metadata"]["resourceVersion"]

    async def _watch(self, version: str) -> str:
        """Follow changes from ``version`` until the server ends the watch; returns the last version."""
        response = await self.call(
            field_selector=self.field_selector,
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS,
            _preload_content=False,
            _request_timeout=WATCH_SECONDS + 30,
        )
        async with response:
            if response.status != 200:
                raise ApiException(status=response.status, reason=(await response.text())[:200])
            async for line in response.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        raise WatchExpiredError(obj.get("message", ""))
                    raise ApiException(status=obj.get("code", 0), reason=obj.get("message", ""))
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if event.get("type") != "BOOKMARK":
                    apply_event(self.items, event["type"], obj, self.trim)
                    self.changed.set()
        return version

    async def run(self) -> None:
        version = None
        while True:
            try:
                if version is None:
                    version = await self._list()
                version = await self._watch(version)
                self.failures = 0
            except asyncio.CancelledError:
                raise
            except WatchExpiredError:
                version = None
            except Exception as error:  # any other failure: forget, wait, LIST again
                version = None
                await self._backoff(error)

    async def _backoff(self, error: Exception) -> None:
        delay = RETRY_SECONDS[min(self.failures, len(RETRY_SECONDS) - 1)]
        status = getattr(error, "status", None)
        if status not in (401, 403):
            delay = min(delay, OUTAGE_RETRY_SECONDS)
        if self.failures == 0:
            hint = " (RBAC: the hub needs list and watch on nodes and pods; docs/spawner.md)" if status == 403 else ""
            self.log.warning("fracnb: cannot read %s for the spawn form's free counts: %r%s", self.kind, error, hint)
        self.failures += 1
        # Stale counts are worse than none: the form shows nothing until a LIST succeeds.
        self.items = {}
        self.loaded.clear()
        self.settled.set()
        self.changed.set()
        await asyncio.sleep(delay)


class MirrorPair:
    """Two kinds of objects kept current together: read as one snapshot, or not at all."""

    def __init__(self, first: Mirror, second: Mirror, changed: asyncio.Event) -> None:
        self.changed = changed  # either kind changed: the GPU queue waits on it
        self.mirrors = (first, second)
        self.tasks = [asyncio.ensure_future(mirror.run()) for mirror in self.mirrors]

    async def snapshot(self, wait: float = FIRST_LOAD_WAIT) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Both kinds now; empty while either cannot be read (the form then shows no counts)."""
        if not all(m.settled.is_set() for m in self.mirrors):
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(m.settled.wait() for m in self.mirrors)), wait)
        if not all(m.loaded.is_set() for m in self.mirrors):
            return [], []
        first, second = self.mirrors
        return first.objects(), second.objects()

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


class ClusterView(MirrorPair):
    """Nodes and GPU-holding pods of the whole cluster, for :func:`.nodes.free_units`."""

    def __init__(self, api: Any, log: logging.Logger | logging.LoggerAdapter = default_log) -> None:
        changed = asyncio.Event()
        self.nodes = Mirror("nodes", api.list_node, trim_node, log=log, changed=changed)
        self.pods = Mirror("pods", api.list_pod_for_all_namespaces, trim_pod, LIVE_PODS, log=log, changed=changed)
        super().__init__(self.nodes, self.pods, changed)
        self.api = api
