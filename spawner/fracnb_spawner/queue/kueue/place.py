"""One spawn's place in Kueue's queue (``c.FracnbQueue.engine = "kueue"``): the pod's labels, the wait, and
the progress page's words, read from the pod's Workload, the team's ClusterQueue and cohort, and Kueue's
visibility API. The pure pieces are in :mod:`.model`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from fracnb_spawner.common.clock import SYSTEM_CLOCK, Clock
from fracnb_spawner.common.errors import RefusedSpawnError
from fracnb_spawner.common.podkeys import QUEUED_AT_ANNOTATION
from fracnb_spawner.hibernation.settings import settings_from_config
from fracnb_spawner.queue.engine import Spawn, Status
from fracnb_spawner.queue.kueue import model as kueue
from fracnb_spawner.queue.kueue.quota import (
    TeamQuota,
    cohort_local_queues,
    cohort_queues,
    quota_form_text,
    team_quota,
    would_wait,
)
from fracnb_spawner.queue.localqueues import local_queue_name, local_queue_of
from fracnb_spawner.queue.order import parse_time, queue_annotations
from fracnb_spawner.queue.releases import Release, estimate, holder_releases
from fracnb_spawner.queue.text import kueue_message

GROUP, VERSION = kueue.GROUP, kueue.VERSION
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2"
# Kueue's webhook gates every pod it is given, and admits one with quota free within about a second: a
# profile that never queues (max_wait 0) still waits this long for Kueue's answer before giving up.
ADMISSION_GRACE_SECONDS = 10.0
RUNNING_POLL_SECONDS = 0.1  # how often a start waiting for Kueue looks whether its pod's gate is gone
# What reading Kueue's objects may raise besides a refusal: the apiserver away, or an object not as expected.
KUEUE_UNREADABLE = (ApiException, aiohttp.ClientError, asyncio.TimeoutError, KeyError, TypeError, ValueError)


def unreadable_text(error: Exception) -> str:
    return str(error.reason) if isinstance(error, ApiException) else f"{type(error).__name__}: {error}"


def unreadable_queue_refusal(local_queue: str, namespace: str, error: Exception) -> RefusedSpawnError:
    return RefusedSpawnError(
        503,
        f"No GPU server was started: the hub could not read your LocalQueue {local_queue} in {namespace} "
        f"({unreadable_text(error)}), and it starts a GPU server only on a queue it has seen is yours. Try again "
        "in a minute; if it keeps failing, tell your hub admin.",
        reason="kueue",
    )


class KueuePlace:
    """A GPU spawn admitted by Kueue (a :class:`.engine.Place`): labelled at pod creation, waiting while the pod
    carries Kueue's gate."""

    # Kueue lifts its gate, not the hub: a look at the watched pod (no request) sees it soonest.
    poll_seconds = RUNNING_POLL_SECONDS
    borrowed = None  # Kueue's cohorts borrow quota; fracnb borrows no card under Kueue

    def __init__(self, spawn: Spawn) -> None:
        self.spawn = spawn
        self.host = host = spawn.host
        self.clock = spawn.clock
        self.max_wait = spawn.max_wait
        self.priority = spawn.priority()
        settings = host.queue_settings()
        self.local_queue = local_queue_name(settings.kueue_local_queue, host.user.name)
        self.visibility_url = settings.kueue_visibility_url
        self.queued_at = self.clock.now()
        self.text: str | None = None
        self.position: int | None = None  # 0-based, in the team's ClusterQueue (Kueue's visibility API)
        # The LocalQueues ("namespace/name") of the ClusterQueue and its cohort: servers there hold the quota
        # this spawn waits for, and their due stops make its estimate.
        self.holder_queues: frozenset[str] = frozenset()

    async def join(self, pod: Any) -> bool:
        """Every GPU pod goes through Kueue, queued or not (a pod without its LocalQueue would not count against the
        team's quota): refused unless the user's LocalQueue is theirs, then labelled; it waits for Kueue's answer."""
        await self.refuse_unless_own_queue()  # another's queue would admit the pod on its quota
        self.label(pod)
        return True

    async def refuse_unless_own_queue(self) -> None:
        """Refuse the spawn (403) unless the user's LocalQueue exists and is theirs (:func:`.model.not_own_queue_text`),
        before its pod exists: a pod labelled with another's queue would be admitted on that queue's quota. A
        LocalQueue that cannot be read refuses it too (503): the check is not skipped."""
        namespace, user = self.host.namespace, self.host.user.name
        objects = client.CustomObjectsApi(self.host.api.api_client)
        try:
            found = await objects.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "localqueues", self.local_queue
            )
        except ApiException as error:
            if error.status != 404:
                raise unreadable_queue_refusal(self.local_queue, namespace, error) from None
            found = None
        except KUEUE_UNREADABLE as error:
            raise unreadable_queue_refusal(self.local_queue, namespace, error) from None
        problem = kueue.not_own_queue_text(found, user, self.local_queue, namespace)
        if problem is not None:
            raise RefusedSpawnError(403, problem, reason="kueue-queue")

    def label(self, pod: Any) -> None:
        """Put the pod in Kueue's hands, with a grace period long enough to hibernate when preempted, and the
        queue's annotations (when it joined, its priority and maximum wait), by which the fracnb service finds it
        after a hub restart and resumes its spawn (service/resume.py)."""
        pod.metadata.labels = {**(pod.metadata.labels or {}), **kueue.pod_labels(self.local_queue, self.priority)}
        pod.metadata.annotations = {
            **(pod.metadata.annotations or {}),
            **queue_annotations(self.queued_at, self.priority, self.max_wait),
        }
        timeout = settings_from_config(self.host.config.FracnbService).timeout
        pod.spec.termination_grace_period_seconds = kueue.termination_grace(
            pod.spec.termination_grace_period_seconds, timeout
        )
        for notebook in pod.spec.containers[:1]:  # KubeSpawner's notebook container comes first
            stop_env = kueue.stop_hibernation_env(timeout)
            notebook.env = [*(notebook.env or []), *(client.V1EnvVar(name=k, value=v) for k, v in stop_env.items())]

    async def take_over(self, wanted: Any) -> tuple[Any, str] | None:
        """When this spawn's pod (``wanted``) already exists: the pod a spawn before a hub restart left waiting for
        Kueue for the same choice, taken over with its Workload and its place in Kueue's queue, and its server's
        token (:func:`.model.kept_server_token`); None (replace it) otherwise. The spawn's maximum wait counts from
        when that pod joined the queue."""
        api, host = self.host.api, self.host
        try:
            pod = await api.read_namespaced_pod(host.pod_name, host.namespace)
        except ApiException:
            return None
        plain, asked = (api.api_client.sanitize_for_serialization(item) for item in (pod, wanted))
        token = kueue.kept_server_token(plain, self.host.user.name, self.host.name, asked)
        if token is None:
            return None
        queued_at = parse_time((plain["metadata"].get("annotations") or {}).get(QUEUED_AT_ANNOTATION))
        self.queued_at = queued_at or self.queued_at
        host.log.info("fracnb: %s resumes its place in Kueue's queue with its pod kept", self.spawn.key)
        return pod, token

    def waiting(self, pod: dict | None) -> bool:
        """Whether the spawn still waits for Kueue (its pod not created yet, or gated)."""
        return pod is None or kueue.is_waiting_for_kueue(pod)

    def remaining(self) -> float:
        """Seconds left of the maximum wait (at least :data:`ADMISSION_GRACE_SECONDS`), counted from when the
        spawn joined Kueue's queue."""
        return max(self.max_wait, ADMISSION_GRACE_SECONDS) - (self.clock.now() - self.queued_at).total_seconds()

    def status(self) -> Status | None:
        """Kueue's place and reason, and the estimate from the due stops of servers holding that quota; None before
        Kueue's view was read."""
        if self.text is None:
            return None
        spawn, now, release = self.spawn, self.clock.now(), None
        if self.position is not None and spawn.ask is not None:
            gives_up_at = self.queued_at + timedelta(seconds=self.max_wait)
            release = holders_release(spawn, self.holder_queues, spawn.ask.kind, self.position + 1, gives_up_at)
        zone = self.host.queue_settings().zone
        return kueue_message(self.text, release, now, zone), [release.at] if release else []

    def pod_created(self) -> None:
        return None

    def counts_the_spawn(self) -> bool:
        return False  # Kueue counts the pod, not the spawn

    def leave(self, *, cancelled: bool, pod: dict | None) -> bool:
        return cancelled and self.waiting(pod)

    async def refresh(self, pod: dict | None) -> str | None:
        """Read Kueue's view of the waiting pod and turn it into the progress page's headline."""
        if pod is None:
            return self.text
        api = self.host.api.api_client
        objects = client.CustomObjectsApi(api)
        namespace = pod["metadata"]["namespace"]
        try:
            selector = f"{kueue.JOB_UID_LABEL}={pod['metadata']['uid']}"
            workloads = await objects.list_namespaced_custom_object(
                GROUP, VERSION, namespace, "workloads", label_selector=selector
            )
            workload = (workloads.get("items") or [None])[0]
            locals_ = (await objects.list_namespaced_custom_object(GROUP, VERSION, namespace, "localqueues")).get(
                "items"
            ) or []
            queues = (await objects.list_cluster_custom_object(GROUP, VERSION, "clusterqueues")).get("items") or []
        except KUEUE_UNREADABLE as error:  # the page keeps its last words
            self.host.log.info("fracnb: Kueue's view of %s unavailable: %s", namespace, unreadable_text(error))
            return self.text
        team_of = {q["metadata"]["name"]: (q.get("spec") or {}).get("clusterQueue") for q in locals_}
        team = team_of.get(self.local_queue)
        if team is None:  # Kueue makes no Workload for it: without these words the page would say nothing
            self.text = kueue.missing_local_queue_text(self.local_queue, namespace)
            return self.text
        peers = cohort_queues(queues, team)
        self.holder_queues = cohort_local_queues(locals_, queues, team, namespace)
        reason = kueue.waiting_reason(workload, team, kueue.borrowers(peers, team))
        self.position = await self._position(namespace, workload)
        self.text = f"Waiting in the GPU queue: {kueue.place_words(self.position)}; {reason}."
        return self.text

    async def _position(self, namespace: str, workload: dict | None) -> int | None:
        """``positionInClusterQueue`` from Kueue's visibility API (through the apiserver, or at
        ``kueue_visibility_url``); None when it cannot be read."""
        if workload is None:
            return None
        path = f"{VISIBILITY}/namespaces/{namespace}/localqueues/{self.local_queue}/pendingworkloads"
        try:
            answer = await self.host.api.api_client.call_api(
                path,
                "GET",
                header_params={"Accept": "application/json"},
                response_types_map={200: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _host=self.visibility_url.rstrip("/") or None,
            )
            return kueue.position_in_cluster_queue(answer, workload["metadata"]["name"])
        except (*KUEUE_UNREADABLE, OSError, AttributeError) as error:  # a place unknown; the headline goes on
            self.host.log.info("fracnb: Kueue's visibility API unavailable: %s", unreadable_text(error))
            return None


def holders_release(
    spawn: Spawn,
    holder_queues: frozenset[str],
    kind: str,
    position: int,
    gives_up_at: datetime,
    *,
    joining: bool = False,
) -> Release | None:
    """The estimate of a spawn ``position``-th in line (1 first) for the quota that the servers in ``holder_queues``
    (LocalQueues) hold: the progress page's and (``joining`` now) the form's, one rule."""
    now = spawn.clock.now()
    holders = [p for p in spawn.watched_pods() if local_queue_of(p) in holder_queues]
    demand_from = now if joining else None
    releases = holder_releases(holders, kind, spawn.activity, now, spawn.cull_defaults(), demand_from=demand_from)
    return estimate(releases, position, now, gives_up_at)


async def read_team_quota(host: Any) -> TeamQuota | None:
    """The user's team quota in Kueue now (queue/kueue/quota.py), with the LocalQueues whose servers hold it (for
    the estimate): one LIST of the LocalQueues in the hub's namespace and one of the ClusterQueues; None when
    Kueue cannot be read or the user has no LocalQueue (said in the log)."""
    settings = host.queue_settings()
    local_queue = local_queue_name(settings.kueue_local_queue, host.user.name)
    objects = client.CustomObjectsApi(host.api.api_client)
    try:
        locals_ = (await objects.list_namespaced_custom_object(GROUP, VERSION, host.namespace, "localqueues")).get(
            "items"
        ) or []
        queues = (await objects.list_cluster_custom_object(GROUP, VERSION, "clusterqueues")).get("items") or []
        team = next((q["spec"]["clusterQueue"] for q in locals_ if q["metadata"]["name"] == local_queue), None)
    except KUEUE_UNREADABLE as error:  # the form goes on without the quota line, never a 500
        host.log.info("fracnb: no Kueue quota on the spawn form of %s: %s", host.user.name, unreadable_text(error))
        return None
    quota = team_quota(queues, team) if team is not None else None
    if quota is None:
        host.log.info("fracnb: no Kueue quota on the spawn form of %s: no LocalQueue %s in %s with a ClusterQueue",
                      host.user.name, local_queue, host.namespace)  # fmt: skip
        return None
    return replace(quota, holder_queues=cohort_local_queues(locals_, queues, team, host.namespace))


class FormQuotaReads:
    """The team quota for one view of the spawn form, read once and shared by its GPU rows: a read younger than
    ``fresh_seconds`` (or still under way) is reused, so a form of five GPU choices costs one GET and one LIST,
    not five of each."""

    def __init__(
        self, read: Callable[[], Awaitable[TeamQuota | None]], clock: Clock = SYSTEM_CLOCK, fresh_seconds: float = 2
    ) -> None:
        self.read = read
        self.clock = clock
        self.fresh_seconds = fresh_seconds
        self._last: tuple[float, asyncio.Future[TeamQuota | None]] | None = None

    async def quota(self) -> TeamQuota | None:
        now = self.clock.monotonic()
        if self._last is None or now - self._last[0] > self.fresh_seconds:
            self._last = (now, asyncio.ensure_future(self.read()))
        # shielded: a form request given up (its browser gone) does not cancel the read its other rows await
        return await asyncio.shield(self._last[1])

    async def form_text(
        self, fraction: Fraction, wait_minutes: Callable[[TeamQuota], float | None] = lambda quota: None
    ) -> str | None:
        """The spawn form's line for a choice of ``fraction`` GPU when a spawn of it would wait for the user's
        team quota in Kueue now, with ``wait_minutes``' estimate for it; None when it would not, or Kueue cannot
        be read."""
        quota, milli = await self.quota(), int(fraction * 1000)
        if quota is None or not would_wait(quota, milli):
            return None
        return quota_form_text(quota, milli, wait_minutes(quota))
