"""One spawner's place in the GPU queue (``FractionalSpawner.queue``).

A spawn whose plan has a slot kind asks the hub-wide :class:`.coordinator.QueueCoordinator` just
before its pod is created: go now, or create the pod gated and wait for the gate to be lifted, up
to the profile's ``queue.max_wait``. While it waits, the progress page shows its place and an
estimate (:mod:`.text`) instead of KubeSpawner's "taking longer" messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import datetime, timezone
from typing import Any, Protocol

from kubernetes_asyncio.client.models import V1PodSchedulingGate

from fracnb_spawner.cluster.slots import Ask
from fracnb_spawner.common.podkeys import (
    FRACTION_ANNOTATION,
    QUEUE_GATE,
    SERVERNAME_ANNOTATION,
    SLOT_KIND_LABEL,
    USERNAME_ANNOTATION,
)
from fracnb_spawner.common.units import format_gpus, parse_fraction
from fracnb_spawner.culling import CullPolicy, ServerActivity, decide, policy_from_annotations
from fracnb_spawner.gpu.plan import GPUPlan
from fracnb_spawner.queue.config import FracnbQueue
from fracnb_spawner.queue.coordinator import QueueCoordinator, Ticket
from fracnb_spawner.queue.metrics import GAVE_UP, WAIT_SECONDS
from fracnb_spawner.queue.order import pod_is_gated, queue_annotations, wait_deadline
from fracnb_spawner.queue.text import (
    Release,
    estimate,
    form_text,
    gave_up_message,
    kept_place_message,
    left_message,
    queued_message,
)
from fracnb_spawner.quota.policy import QuotaPolicy

PROGRESS_POLL_SECONDS = 1.0
RUNNING_POLL_SECONDS = 0.1  # how often a start not waiting in the queue looks whether its pod runs


class QueueTimeoutError(Exception):
    """The spawn waited its profile's maximum in the queue."""


class QueueHost(Protocol):
    """What the queue reads of its spawner."""

    name: str  # the server's name ("" for the default server)
    namespace: str
    pod_name: str
    start_timeout: float
    user: Any
    log: Any

    @property
    def pod_reflector(self) -> Any: ...
    def quota_policy(self) -> QuotaPolicy: ...
    def queue_settings(self) -> FracnbQueue: ...


class SpawnQueue:
    """The queue state of one spawner's current spawn: its ask, its ticket while it waits, and its limits."""

    def __init__(
        self,
        host: QueueHost,
        coordinator: Callable[[], QueueCoordinator | None],
        activity: Callable[[str | None, str], ServerActivity | None],
    ) -> None:
        self.host = host
        self.coordinator = coordinator  # the hub's queue; None while the hub does not watch the cluster yet
        self.activity = activity  # a server's start and last activity, from the hub's records
        self.reset()

    def reset(self, ask: Ask | None = None, max_wait: float = 0, plan: GPUPlan | None = None) -> None:
        """A new spawn: what it may queue for (``max_wait`` 0: it never queues)."""
        self.ask = ask if max_wait > 0 else None
        self.max_wait = max_wait
        self.plan = plan
        self.ticket: Ticket | None = None
        self.started_limit: float | None = None  # seconds the pod may take to run once its gate is lifted
        self.went_straight = False  # the queue let this spawn's pod go to the scheduler at once
        self.left: tuple[datetime, str] | None = None  # when the user left the queue, and the confirmation

    @property
    def key(self) -> str:
        return f"{self.host.namespace}/{self.host.pod_name}"

    def priority(self) -> int:
        return self.host.queue_settings().priority(self.host.user.name, list(self.groups()))

    def groups(self) -> dict[str, list[str]]:
        groups = getattr(self.host.user, "groups", None) or []
        return {group.name: [member.name for member in group.users] for group in groups}

    async def join(self, queue: QueueCoordinator, pod: Any) -> None:
        """Before the pod is created: go to the scheduler now, or gate the pod and wait (once per spawn)."""
        if self.ask is None or self.ticket is not None:
            return
        host = self.host
        ticket = Ticket(
            key=self.key, ask=self.ask, user=host.user.name, groups=self.groups(), priority=self.priority(),
            queued_at=datetime.now(timezone.utc), max_wait=self.max_wait, policy=host.quota_policy(),
        )  # fmt: skip
        if await queue.admit(ticket):
            self.went_straight = True
            return
        self.ticket = ticket
        pod.spec.scheduling_gates = [*(pod.spec.scheduling_gates or []), V1PodSchedulingGate(name=QUEUE_GATE)]
        pod.metadata.annotations = {
            **(pod.metadata.annotations or {}),
            **queue_annotations(ticket.queued_at, ticket.priority, ticket.max_wait),
        }
        # KubeSpawner waits start_timeout for the pod to run: the wait in the queue comes first.
        self.started_limit = max(1.0, host.start_timeout * 0.9)
        host.start_timeout = host.start_timeout + self.max_wait
        host.log.info("fracnb: %s queued for %s", self.key, self.ask.kind)

    def pod_created(self) -> None:
        """This spawn's pod exists now: a place it took over from a gated pod of the same name may be lifted."""
        ticket = self.ticket
        if ticket is not None and ticket.replacing:
            ticket.replacing = False
            queue = self.coordinator()
            if queue is not None:
                queue.view.changed.set()

    async def await_started(self, inner: asyncio.Future, running: Callable[[], Any] = lambda: None) -> Any:
        """Wait for KubeSpawner's start: the queue's maximum wait while gated, 90 % of start_timeout after.

        ``running()``: the start's result once its pod runs, else None. KubeSpawner checks the pod with a
        back-off that reaches 5 s between looks, so a pod that took a few seconds is seen running up to
        seconds late; looking every ``RUNNING_POLL_SECONDS`` here returns as soon as it runs (the caller
        then cancels KubeSpawner's wait).
        """
        loop = asyncio.get_running_loop()
        began = loop.time()
        lifted_seen = False
        while True:
            ticket = self.ticket
            if ticket is not None and ticket.waiting:
                remaining = ticket.max_wait - (datetime.now(timezone.utc) - ticket.queued_at).total_seconds()
                if remaining <= 0:
                    raise QueueTimeoutError
                poll = PROGRESS_POLL_SECONDS
            else:
                if ticket is not None and not lifted_seen:
                    lifted_seen, began = True, loop.time()
                limit = self.started_limit if lifted_seen else max(1.0, self.host.start_timeout * 0.9)
                remaining = began + (limit or 1.0) - loop.time()
                if remaining <= 0:
                    raise asyncio.TimeoutError
                poll = RUNNING_POLL_SECONDS
            done, _ = await asyncio.wait({inner}, timeout=min(remaining, poll))
            if done:
                return inner.result()
            result = running()
            if result is not None:
                return result

    def gave_up(self) -> str:
        """The message after the maximum wait (the spawner then removes the pod)."""
        GAVE_UP.labels(reason="max-wait").inc()
        return gave_up_message(self.plan, self.ticket.max_wait if self.ticket else 0)

    def leave(self, *, cancelled: bool) -> None:
        """The spawn ended (started, failed or was cancelled): give up the place and record the wait."""
        ticket, self.ticket = self.ticket, None
        if ticket is not None and ticket.lifted.is_set():
            WAIT_SECONDS.observe(max(ticket.lifted_at - ticket.queued_at.timestamp(), 0.0))
        elif ticket is not None and cancelled:
            GAVE_UP.labels(reason="cancelled").inc()
            self.note_left()
        queue = self.coordinator()
        if queue is not None and self.ask is not None:
            queue.forget(self.key, ticket)

    @property
    def waiting(self) -> bool:
        """Whether this spawn waits in the queue now."""
        return self.ticket is not None and self.ticket.waiting

    def note_left(self) -> None:
        """The user stopped this spawn while it waited: keep the confirmation their next page shows."""
        if self.left is None:
            self.left = (datetime.now(timezone.utc), left_message(self.plan))

    def note_stopped(self, left_queue: dict[tuple[str, str], tuple[datetime, str]]) -> None:
        """The spawner is stopped: a spawn still waiting was left by its user. Keep the confirmation in
        ``left_queue`` (``HubState.left_queue``), where the hub's pages read it."""
        if self.waiting:
            self.note_left()
        if self.left is not None:
            left_queue[(self.host.user.name, self.host.name)] = self.left

    # ---- a hub restart while queued ------------------------------------------------------------

    def reflected_pod(self) -> dict | None:
        """This server's pod as KubeSpawner's pod reflector has it (None also while not watching pods yet)."""
        reflector = self.host.pod_reflector
        return reflector.pods.get(self.key) if reflector is not None else None

    def pod_in_queue(self) -> dict | None:
        """This server's pod from KubeSpawner's reflector, if it waits in the queue."""
        pod = self.reflected_pod()
        return pod if pod is not None and pod_is_gated(pod) else None

    def kept_place_text(self) -> str | None:
        """The spawn form's notice when this server's pod waits in the queue with no spawn waiting on it."""
        pod = self.pod_in_queue() if self.ticket is None else None
        deadline = wait_deadline(pod) if pod is not None else None
        if deadline is None:
            return None
        zone = self.host.queue_settings().zone
        return kept_place_message(self.plan, deadline, datetime.now(timezone.utc), zone)

    # ---- what the user reads -------------------------------------------------------------------

    def hides_patience(self) -> bool:
        """Whether KubeSpawner's "taking longer than expected" would mislead: while the queue decides, while
        the spawn waits in it, and once its turn came (its clock counts the wait)."""
        return self.ask is not None and not self.went_straight

    def status_text(self) -> str | None:
        """The progress headline while this spawn waits in the queue, else None."""
        ticket = self.ticket
        if ticket is None or not ticket.waiting:
            return None
        release, now = None, datetime.now(timezone.utc)
        if ticket.position:
            release = estimate(self.releases(ticket.kind), ticket.position, now)
        zone = self.host.queue_settings().zone
        return queued_message(self.plan, ticket.position, release, now, zone)

    async def progress(self, done: Callable[[], bool]) -> AsyncIterator[dict]:
        """The queue headline whenever it changes, until the spawn is ``done``."""
        last = None
        while not done():
            text = self.status_text()
            if text and text != last:
                last = text
                yield {"progress": 10, "message": text}
            await asyncio.sleep(PROGRESS_POLL_SECONDS)

    async def form_text(self, ask: Ask | None, max_wait: float) -> str | None:
        """The form's "queue: 2 waiting, about 10 min" for a choice whose spawn would wait now, else None."""
        queue = self.coordinator()
        if queue is None or ask is None or max_wait <= 0:
            return None
        capacity = await queue.capacity(ask)
        if capacity is None or (capacity.free > 0 and capacity.waiting == 0):
            return None
        now = datetime.now(timezone.utc)
        release = estimate(self.releases(ask.kind), capacity.waiting + 1, now)
        minutes = (release.at - now).total_seconds() / 60 if release else None
        return form_text(capacity.free, capacity.waiting, minutes)

    def releases(self, kind: str) -> list[Release]:
        """When servers holding slots of ``kind`` are due to be culled (idle or max age), from the hub's records."""
        queue = self.coordinator()
        if queue is None:
            return []
        now = datetime.now(timezone.utc)
        releases = []
        for pod in queue.view.pods.objects():
            metadata = pod.get("metadata") or {}
            if (metadata.get("labels") or {}).get(SLOT_KIND_LABEL) != kind or not pod["spec"].get("nodeName"):
                continue
            release = _release(metadata.get("annotations") or {}, self.activity, now)
            if release is not None:
                releases.append(release)
        return releases


def _release(
    annotations: Mapping[str, str], activity: Callable[[str | None, str], ServerActivity | None], now: datetime
) -> Release | None:
    server = activity(annotations.get(USERNAME_ANNOTATION), annotations.get(SERVERNAME_ANNOTATION, ""))
    if server is None:
        return None
    decision = decide(server, policy_from_annotations(annotations, CullPolicy()), now=now, warning_lead=0)
    if decision.cull_at is None or decision.reason is None:
        return None
    fraction = format_gpus(parse_fraction(annotations.get(FRACTION_ANNOTATION, "0")))
    return Release(decision.cull_at, decision.reason, fraction)


def ready_unless_left(spawner: Any, ready_event: dict) -> dict:
    """``FractionalSpawner.progress_ready_hook``: a spawn the user stopped while it waited in the queue is not
    "ready", though JupyterHub's progress stream says so once it cancelled it (its page would then go to a
    server that is not there, and back, and end on a 424): the page says the user left the queue instead."""
    spawner.queue.note_stopped(spawner.hub_state.left_queue)
    left = spawner.queue.left
    return ready_event if left is None else {"progress": 100, "failed": True, "message": left[1]}


async def merge(*streams: AsyncIterator[dict]) -> AsyncIterator[dict]:
    """Events of several async iterators as they come, until all have ended."""
    queue: asyncio.Queue = asyncio.Queue()
    done = object()

    async def pump(stream: AsyncIterator[dict]) -> None:
        try:
            async for item in stream:
                await queue.put(item)
        finally:
            await queue.put(done)

    tasks = [asyncio.ensure_future(pump(s)) for s in streams]
    remaining = len(tasks)
    try:
        while remaining:
            item = await queue.get()
            if item is done:
                remaining -= 1
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def hub_server_activity(db: Any, user: str | None, server: str) -> ServerActivity | None:
    """A server's start and last activity from the hub's database; None when unknown."""
    if not user:
        return None
    try:
        from jupyterhub import orm  # noqa: PLC0415 - only inside a hub

        row = db.query(orm.Spawner).join(orm.User).filter(orm.User.name == user, orm.Spawner.name == server).first()
    except Exception:  # a mock user, no database: no estimate
        return None
    if row is None or row.server is None:
        return None
    return ServerActivity(started=_utc(row.started), last_activity=_utc(row.last_activity), ready=True)


def _utc(moment: datetime | None) -> datetime | None:
    if moment is None:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
