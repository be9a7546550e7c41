"""One spawner's place in the GPU queue (``FractionalSpawner.queue``).

A spawn whose plan has a slot kind asks the hub-wide :class:`.coordinator.QueueCoordinator` just
before its pod is created: go now, or create the pod gated and wait for the gate to be lifted, up
to the profile's ``queue.max_wait``. While it waits, the progress page shows its place and an
estimate (:mod:`.text`) instead of KubeSpawner's "taking longer" messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from typing import Any, Protocol

from kubernetes_asyncio.client.models import V1PodSchedulingGate
from markupsafe import Markup

from fracnb_spawner.cluster.slots import Ask
from fracnb_spawner.common.clock import SYSTEM_CLOCK, Clock
from fracnb_spawner.common.podkeys import QUEUE_GATE
from fracnb_spawner.common.timehtml import with_times
from fracnb_spawner.culling import ServerActivity
from fracnb_spawner.gpu.plan import CPU_ONLY, GPUPlan
from fracnb_spawner.history.hubstops import HubStops
from fracnb_spawner.history.stops import LEFT_QUEUE, StopNotice
from fracnb_spawner.queue.config import FracnbQueue
from fracnb_spawner.queue.coordinator import QueueCoordinator, Ticket
from fracnb_spawner.queue.kueue import is_waiting_for_kueue, local_queue_of
from fracnb_spawner.queue.kueueplace import FormQuotaReads, KueuePlace, read_team_quota
from fracnb_spawner.queue.metrics import GAVE_UP, WAIT_SECONDS
from fracnb_spawner.queue.order import pod_is_gated, queue_annotations, wait_deadline
from fracnb_spawner.queue.releases import CullDefaults, Release, estimate, holder_releases
from fracnb_spawner.queue.text import (
    form_text,
    gave_up_message,
    kept_place_message,
    kueue_message,
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
    config: Any
    api: Any

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
        cull_defaults: Callable[[], CullDefaults] = CullDefaults,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.host = host
        self.coordinator = coordinator  # the hub's queue; None while the hub does not watch the cluster yet
        self.activity = activity  # a server's start and last activity, from the hub's records
        self.cull_defaults = cull_defaults  # the fracnb service's default policy and warning lead
        self.clock = clock
        self.form_quota = FormQuotaReads(lambda: read_team_quota(host), clock)  # with engine "kueue"
        self.reset()

    def reset(self, ask: Ask | None = None, max_wait: float = 0, plan: GPUPlan | None = None) -> None:
        """A new spawn: what it may queue for (``max_wait`` 0: it never queues)."""
        self.ask = ask if max_wait > 0 else None
        self.max_wait = max_wait
        self.plan = plan
        self.ticket: Ticket | None = None
        self.kueue: KueuePlace | None = None  # with engine "kueue": this spawn's place in Kueue's queue
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
        if self.ticket is not None or self.kueue is not None:
            return
        host = self.host
        if host.queue_settings().engine == "kueue":
            # Every GPU pod goes through Kueue, queued or not: a pod without its LocalQueue would not count
            # against the team's quota.
            if self.plan is None or self.plan is CPU_ONLY:
                return
            self.kueue = KueuePlace(host, self.max_wait, self.priority(), self.clock)
            self.kueue.label(pod)
            self.started_limit = max(1.0, host.start_timeout * 0.9)
            host.start_timeout = host.start_timeout + self.max_wait
            return
        if self.ask is None:
            return
        ticket = Ticket(
            key=self.key, ask=self.ask, user=host.user.name, groups=self.groups(), priority=self.priority(),
            queued_at=self.clock.now(), max_wait=self.max_wait, policy=host.quota_policy(),
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
        clock = self.clock
        began = clock.monotonic()
        lifted_seen = False
        while True:
            ticket, place = self.ticket, self.kueue
            if place is not None and not lifted_seen and place.waiting(self.reflected_pod()):
                remaining = place.remaining()
                if remaining <= 0:
                    raise QueueTimeoutError
                # Kueue lifts its gate, not the hub: a look at the watched pod (no request) sees it soonest.
                poll = RUNNING_POLL_SECONDS
            elif ticket is not None and ticket.waiting:
                remaining = ticket.max_wait - (clock.now() - ticket.queued_at).total_seconds()
                if remaining <= 0:
                    raise QueueTimeoutError
                poll = PROGRESS_POLL_SECONDS
            else:
                if (ticket is not None or place is not None) and not lifted_seen:
                    lifted_seen, began = True, clock.monotonic()
                limit = self.started_limit if lifted_seen else max(1.0, self.host.start_timeout * 0.9)
                remaining = began + (limit or 1.0) - clock.monotonic()
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
        return gave_up_message(self.plan, self.ticket.max_wait if self.ticket else self.max_wait)

    def leave(self, *, cancelled: bool) -> None:
        """The spawn ended (started, failed or was cancelled): give up the place and record the wait."""
        ticket, self.ticket = self.ticket, None
        if self.kueue is not None and cancelled and self.waiting:
            GAVE_UP.labels(reason="cancelled").inc()
            self.note_left()
        self.kueue = None
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
        if self.kueue is not None:
            return self.kueue.waiting(self.reflected_pod())
        return self.ticket is not None and self.ticket.waiting

    def note_left(self) -> None:
        """The user stopped this spawn while it waited: keep the confirmation their next page shows."""
        if self.left is None:
            self.left = (self.clock.now(), left_message(self.plan))

    def note_stopped(self, stops: HubStops) -> bool:
        """The spawner is stopped: a spawn still waiting was left by its user. Keep the confirmation in
        ``stops`` (``HubState.stops``), where the hub's pages read it; whether it was."""
        if self.waiting:
            self.note_left()
        if self.left is None:
            return False
        when, text = self.left
        stops.note(StopNotice(self.host.user.name, self.host.name, when, LEFT_QUEUE, details={"text": text}))
        return True

    # ---- a hub restart while queued ------------------------------------------------------------

    def reflected_pod(self) -> dict | None:
        """This server's pod as KubeSpawner's pod reflector has it (None also while not watching pods yet)."""
        reflector = self.host.pod_reflector
        return reflector.pods.get(self.key) if reflector is not None else None

    def pod_in_queue(self) -> dict | None:
        """This server's pod from KubeSpawner's reflector, if it waits in the queue (fracnb's or Kueue's)."""
        pod = self.reflected_pod()
        return pod if pod is not None and (pod_is_gated(pod) or is_waiting_for_kueue(pod)) else None

    async def take_over_kept_pod(self, wanted: Any) -> tuple[Any, str] | None:
        """With engine "kueue", when this spawn's pod (``wanted``) already exists: the pod a spawn before a hub
        restart left waiting for Kueue for the same choice, taken over with its Workload and its place in Kueue's
        queue, and its server's token; None (replace it) otherwise. fracnb's own queue replaces the pod and keeps
        the place itself."""
        if self.kueue is None:
            return None
        kept = await self.kueue.take_over(self.host.namespace, self.host.pod_name, wanted)
        if kept is not None:
            self.host.log.info("fracnb: %s resumes its place in Kueue's queue with its pod kept", self.key)
        return kept

    def kept_place_text(self) -> Markup | None:
        """The spawn form's notice when this server's pod waits in the queue with no spawn waiting on it, its
        time as a <time> the form shows in the reader's zone."""
        pod = self.pod_in_queue() if self.ticket is None else None
        deadline = wait_deadline(pod) if pod is not None else None
        if deadline is None:
            return None
        zone = self.host.queue_settings().zone
        return with_times(kept_place_message(self.plan, deadline, self.clock.now(), zone), [deadline], zone)

    # ---- what the user reads -------------------------------------------------------------------

    def hides_patience(self) -> bool:
        """Whether KubeSpawner's "taking longer than expected" would mislead: while the queue decides, while
        the spawn waits in it, and once its turn came (its clock counts the wait)."""
        return self.ask is not None and not self.went_straight

    def status_text(self) -> str | None:
        """The progress headline while this spawn waits in the queue, else None."""
        status = self._status()
        return status[0] if status else None

    def status_html(self) -> Markup | None:
        """:meth:`status_text` with its times as <time> elements, which a page carrying
        ``LOCAL_TIMES_SCRIPT`` shows in the reader's zone (common/timehtml.py)."""
        status = self._status()
        return with_times(*status, self.host.queue_settings().zone) if status else None

    def _status(self) -> tuple[str, list[datetime]] | None:
        """The headline and the times it says (the estimate), in the hub's zone."""
        if self.kueue is not None:
            return self._kueue_status() if self.waiting and self.kueue.text else None
        ticket = self.ticket
        if ticket is None or not ticket.waiting:
            return None
        release, now = None, self.clock.now()
        if ticket.position:
            gives_up_at = ticket.queued_at + timedelta(seconds=ticket.max_wait)
            release = estimate(self.releases(ticket.kind, now), ticket.position, now, gives_up_at)
        zone = self.host.queue_settings().zone
        return queued_message(self.plan, ticket.position, release, now, zone), [release.at] if release else []

    def _kueue_status(self) -> tuple[str, list[datetime]]:
        """Kueue's place and reason, and the estimate from the due stops of servers holding that quota."""
        place, now = self.kueue, self.clock.now()
        release = None
        if place.position is not None and self.ask is not None:
            holders = [p for p in self._watched_pods() if local_queue_of(p) in place.holder_queues]
            releases = holder_releases(holders, self.ask.kind, self.activity, now, self.cull_defaults())
            release = estimate(releases, place.position + 1, now, place.queued_at + timedelta(seconds=self.max_wait))
        zone = self.host.queue_settings().zone
        return kueue_message(place.text, release, now, zone), [release.at] if release else []

    def _watched_pods(self) -> list[dict]:
        queue = self.coordinator()
        return list(queue.view.pods.objects()) if queue is not None else []

    async def progress(self, done: Callable[[], bool]) -> AsyncIterator[dict]:
        """The queue headline whenever it changes, until the spawn is ``done``; on the page its times are in
        the reader's zone (the progress page carries ``LOCAL_TIMES_SCRIPT``)."""
        last = None
        while not done():
            if self.kueue is not None and self.waiting:
                await self.kueue.refresh(self.reflected_pod())
            status = self._status()
            if status and status[0] != last:
                last = status[0]
                html = with_times(*status, self.host.queue_settings().zone)
                yield {"progress": 10, "message": last, "html_message": str(html)}
            await asyncio.sleep(PROGRESS_POLL_SECONDS)

    async def form_text(self, ask: Ask | None, max_wait: float, fraction: Fraction = Fraction(0)) -> str | None:
        """The form's "queue: 2 waiting, about 10 min" for a choice of ``fraction`` GPU whose spawn would wait
        now, else None; with the kueue engine, from the user's team quota in Kueue (queue/kueuequota.py)."""
        queue = self.coordinator()
        if queue is None or ask is None or max_wait <= 0:
            return None
        if self.host.queue_settings().engine == "kueue":
            return await self.form_quota.form_text(fraction)
        capacity = await queue.capacity(ask)
        if capacity is None or (capacity.free > 0 and capacity.waiting == 0):
            return None
        now = self.clock.now()
        release = estimate(self.releases(ask.kind, now), capacity.waiting + 1, now, now + timedelta(seconds=max_wait))
        minutes = (release.at - now).total_seconds() / 60 if release else None
        return form_text(capacity.free, capacity.waiting, minutes)

    def releases(self, kind: str, now: datetime) -> list[Release]:
        """When the servers holding slots of ``kind`` are due to be stopped, as the fracnb service decides it
        (:func:`.releases.holder_releases`), from the hub's watch and records."""
        queue = self.coordinator()
        if queue is None:
            return []
        return holder_releases(queue.view.pods.objects(), kind, self.activity, now, self.cull_defaults())


def ready_unless_left(spawner: Any, ready_event: dict) -> dict:
    """``FractionalSpawner.progress_ready_hook``: a spawn the user stopped while it waited in the queue is not
    "ready", though JupyterHub's progress stream says so once it cancelled it (its page would then go to a
    server that is not there, and back, and end on a 424): the page says the user left the queue instead."""
    spawner.queue.note_stopped(spawner.hub_state.stops)
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
