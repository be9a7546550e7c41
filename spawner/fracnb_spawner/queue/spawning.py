"""One spawner's place in the GPU queue (``FractionalSpawner.queue``).

Just before a spawn's pod is created, the queue engine (:mod:`.engine`, chosen once by ``c.FracnbQueue.engine``)
gives it a place: fracnb's coordinator lets the pod go now or gates it (:mod:`.builtin`), or Kueue gates it
(:mod:`.kueue.engine`). The spawn then waits for the gate to be lifted, up to the profile's ``queue.max_wait``.
While it waits, the progress page shows its place and an estimate (:mod:`.text`) instead of KubeSpawner's "taking
longer" messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any, Protocol

from markupsafe import Markup

from fracnb_spawner.borrowing.decide import Borrow
from fracnb_spawner.borrowing.words import FORM_BORROWS, STARTING_BORROWED
from fracnb_spawner.cluster.slots import Ask
from fracnb_spawner.common.clock import SYSTEM_CLOCK, Clock
from fracnb_spawner.common.podkeys import is_waiting
from fracnb_spawner.common.timehtml import with_times
from fracnb_spawner.culling import ServerActivity
from fracnb_spawner.gpu.plan import GPUPlan
from fracnb_spawner.history.hubstopnotices import HubStops
from fracnb_spawner.history.stopnotices import LEFT_QUEUE, StopNotice
from fracnb_spawner.queue.config import FracnbQueue
from fracnb_spawner.queue.coordinator import QueueCoordinator
from fracnb_spawner.queue.engine import Engine, Place
from fracnb_spawner.queue.engines import engine_of
from fracnb_spawner.queue.metrics import GAVE_UP
from fracnb_spawner.queue.order import wait_deadline
from fracnb_spawner.queue.releases import CullDefaults, Release, holder_releases
from fracnb_spawner.queue.text import gave_up_message, kept_place_message, left_message
from fracnb_spawner.quota.policy import QuotaPolicy

PROGRESS_POLL_SECONDS = 1.0  # how often the progress page's headline is looked at
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
    """The queue state of one spawner's current spawn: its ask, its place in the engine's queue, and its limits."""

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
        self.form_quota: Any = None  # the engine's reads for the spawn form, shared by its rows (Kueue's quota)
        self.reset()

    def reset(
        self, ask: Ask | None = None, max_wait: float = 0, plan: GPUPlan | None = None, borrow: Borrow | None = None
    ) -> None:
        """A new spawn: what it may queue for (``max_wait`` 0: it never queues), and where it may start instead
        while its own pool is full (``borrow``, :mod:`fracnb_spawner.borrowing`)."""
        self.ask = ask if max_wait > 0 else None
        self.borrow = borrow if self.ask is not None else None
        self.borrowed: Ask | None = None  # the borrowable pool's ask this spawn went to the scheduler with
        self.max_wait = max_wait
        self.plan = plan
        self.place: Place | None = None  # this spawn's place in the engine's queue, once it joined
        self.started_limit: float | None = None  # seconds the pod may take to run once its gate is lifted
        self.went_straight = False  # the queue let this spawn's pod go to the scheduler at once
        self.left: tuple[datetime, str] | None = None  # when the user left the queue, and the confirmation

    @property
    def engine(self) -> Engine:
        """The queue engine of the hub's configuration (``c.FracnbQueue.engine``)."""
        return engine_of(self.host.queue_settings())

    @property
    def key(self) -> str:
        return f"{self.host.namespace}/{self.host.pod_name}"

    def priority(self) -> int:
        return self.host.queue_settings().priority(self.host.user.name, list(self.groups()))

    def groups(self) -> dict[str, list[str]]:
        groups = getattr(self.host.user, "groups", None) or []
        return {group.name: [member.name for member in group.users] for group in groups}

    async def join(self, queue: QueueCoordinator, pod: Any) -> None:
        """Before the pod is created: take the spawn's place in the engine's queue, which lets the pod go to the
        scheduler now or gates it to wait (once per spawn; a spawn that went straight asks again when KubeSpawner
        creates its pod again after a leftover one)."""
        if self.place is not None and not self.went_straight:
            return
        place = self.engine.place(self, queue)
        if place is None:
            return
        waits = await place.join(pod)
        self.place = place
        if not waits:
            self.went_straight = True
            self.borrowed = place.borrowed
            return
        # KubeSpawner waits start_timeout for the pod to run: the wait in the queue comes first.
        host = self.host
        self.started_limit = max(1.0, host.start_timeout * 0.9)
        host.start_timeout = host.start_timeout + self.max_wait

    def pod_created(self) -> None:
        """This spawn's pod exists now (a place it took over from a gated pod of the same name may be lifted)."""
        if self.place is not None:
            self.place.pod_created()

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
            place = self.place if self.started_limit is not None else None  # a place that waited
            if place is not None and not lifted_seen and place.waiting(self.reflected_pod()):
                remaining = place.remaining()
                if remaining <= 0:
                    raise QueueTimeoutError
                poll = place.poll_seconds
            else:
                if place is not None and not lifted_seen:
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
        return gave_up_message(self.plan, self.max_wait)

    def leave(self, *, cancelled: bool) -> None:
        """The spawn ended (started, failed or was cancelled): give up the place and record the wait."""
        place, self.place = self.place, None
        if place is not None and place.leave(cancelled=cancelled, pod=self.reflected_pod()):
            GAVE_UP.labels(reason="cancelled").inc()
            self.note_left()

    @property
    def waiting(self) -> bool:
        """Whether this spawn waits in the queue now."""
        return self.place is not None and self.place.waiting(self.reflected_pod())

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
        return pod if pod is not None and is_waiting(pod) else None

    async def take_over_kept_pod(self, wanted: Any) -> tuple[Any, str] | None:
        """When this spawn's pod (``wanted``) already exists: that pod and its server's token if the engine resumes
        the spawn's place with it (Kueue: a pod a spawn before a hub restart left waiting, with its Workload and
        its place in Kueue's queue); None: replace it (fracnb's own queue keeps the place itself)."""
        return await self.place.take_over(wanted) if self.place is not None else None

    def kept_place_text(self) -> Markup | None:
        """The spawn form's notice when this server's pod waits in the queue with no spawn waiting on it, its
        time as a <time> the form shows in the reader's zone."""
        counted = self.place is not None and self.place.counts_the_spawn()
        pod = self.pod_in_queue() if not counted else None
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
        return self.place.status() if self.place is not None and self.waiting else None

    def watched_pods(self) -> list[dict]:
        """The pods the hub's queue watches (none before it watches)."""
        queue = self.coordinator()
        return list(queue.view.pods.objects()) if queue is not None else []

    async def progress(self, done: Callable[[], bool]) -> AsyncIterator[dict]:
        """The queue headline whenever it changes, until the spawn is ``done``; on the page its times are in
        the reader's zone (the progress page carries ``LOCAL_TIMES_SCRIPT``)."""
        last = None
        while not done():
            if self.place is not None and self.waiting:
                await self.place.refresh(self.reflected_pod())
            borrowed = self.borrowed or (self.place.borrowed if self.place is not None else None)  # at its turn
            status = self._status() or ((STARTING_BORROWED, []) if borrowed is not None else None)
            if status and status[0] != last:
                last = status[0]
                html = with_times(*status, self.host.queue_settings().zone)
                yield {"progress": 10, "message": last, "html_message": str(html)}
            await asyncio.sleep(PROGRESS_POLL_SECONDS)

    async def form_text(
        self, ask: Ask | None, max_wait: float, fraction: Fraction = Fraction(0), borrow: Borrow | None = None
    ) -> str | None:
        """The form's "queue: 2 waiting, about 10 min" for a choice of ``fraction`` GPU whose spawn would wait
        now, else None, in the engine's words (with Kueue, from the user's team quota); that it would start on a
        borrowed card instead, where its ``borrow`` pool has room now (fracnb's own queue)."""
        queue = self.coordinator()
        if queue is None or ask is None or max_wait <= 0:
            return None
        text = await self.engine.form_text(self, queue, ask, max_wait, fraction)
        if text is None or borrow is None or self.engine.name != "builtin":
            return text
        room = await queue.capacity(borrow.ask)
        return FORM_BORROWS if room is not None and room.free > 0 and room.waiting == 0 else text

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
