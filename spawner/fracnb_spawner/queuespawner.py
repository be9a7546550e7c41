"""The spawner's side of the GPU queue, mixed into ``FractionalSpawner``.

A spawn whose choice has a slot kind asks the hub-wide :class:`.queueing.QueueCoordinator`
just before its pod is created: go now, or create the pod gated and wait for the gate to be
lifted, up to the profile's ``queue.max_wait``. While it waits, the progress page shows its
place and an estimate (:mod:`.queuetext`) instead of KubeSpawner's "taking longer" messages.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kubernetes_asyncio.client.models import V1PodSchedulingGate

from .culling import CullPolicy, ServerActivity, decide, policy_from_annotations
from .queueconfig import FracnbQueue, queue_max_wait
from .queueing import Ticket, shared_queue
from .queuemetrics import GAVE_UP, WAIT_SECONDS
from .queueorder import QUEUE_GATE, SLOT_KIND_LABEL, pod_is_gated, queue_annotations, wait_deadline
from .queuetext import Release, estimate, form_text, gave_up_message, kept_place_message, queued_message
from .quota import SERVERNAME_ANNOTATION, USERNAME_ANNOTATION, format_gpus
from .slots import Ask
from .units import parse_fraction

PROGRESS_POLL_SECONDS = 1.0
_queue_settings: dict[int, tuple[Any, FracnbQueue]] = {}


class QueueTimeoutError(Exception):
    """The spawn waited its profile's maximum in the queue."""


@dataclass(frozen=True)
class QueuePlan:
    """What a spawn would queue for: the slot kind of its pod and how long it may wait."""

    ask: Ask
    max_wait: float


class QueueingSpawner:
    """The queue-facing methods of ``FractionalSpawner`` (which provides the attributes used here)."""

    _queue_plan: QueuePlan | None = None
    _queue_ticket: Ticket | None = None
    _queue_started_limit: float | None = None  # seconds the pod may take to run once its gate is lifted
    _longest_queue_wait: float = 0
    _queue_went_straight: bool = False  # the queue let this spawn's pod go to the scheduler at once

    def start(self) -> Any:
        future = super().start()  # type: ignore[misc]
        if self._longest_queue_wait:
            # The hub waits start_timeout for start() (read right after this returns): a queued spawn
            # may wait longer for its turn. load_user_options restores the configured value.
            self._remember("start_timeout")  # type: ignore[attr-defined]
            self.start_timeout = self.start_timeout + self._longest_queue_wait  # type: ignore[has-type]
        return future

    def queue_settings(self) -> FracnbQueue:
        """``c.FracnbQueue`` of this hub's config (made once per config)."""
        cached = _queue_settings.get(id(self.config))  # type: ignore[attr-defined]
        if cached is None or cached[0] is not self.config:  # type: ignore[attr-defined]
            cached = (self.config, FracnbQueue(parent=self))  # type: ignore[attr-defined, arg-type]
            _queue_settings[id(self.config)] = cached  # type: ignore[attr-defined]
        return cached[1]

    def queue_priority(self) -> int:
        return self.queue_settings().priority(self.user.name, list(self._queue_groups()))  # type: ignore[attr-defined]

    def _queue_groups(self) -> dict[str, list[str]]:
        groups = getattr(self.user, "groups", None) or []  # type: ignore[attr-defined]
        return {group.name: [member.name for member in group.users] for group in groups}

    async def _make_create_pod_request(self, pod: Any, request_timeout: float) -> bool:
        """KubeSpawner's pod creation, after the queue said go now, or with the pod gated."""
        plan = self._queue_plan
        if plan is not None and self._queue_ticket is None:
            await self._join_queue(plan, pod)
        return await super()._make_create_pod_request(pod, request_timeout)  # type: ignore[misc]

    async def _join_queue(self, plan: QueuePlan, pod: Any) -> None:
        ticket = Ticket(
            key=f"{self.namespace}/{self.pod_name}",  # type: ignore[attr-defined]
            ask=plan.ask,
            user=self.user.name, groups=self._queue_groups(),  # type: ignore[attr-defined]
            priority=self.queue_priority(), queued_at=datetime.now(timezone.utc), max_wait=plan.max_wait,
            policy=self.quota_policy(),  # type: ignore[attr-defined]
        )  # fmt: skip
        queue = shared_queue(await self._view(), self.api, self.log)  # type: ignore[attr-defined]
        if await queue.admit(ticket):
            self._queue_went_straight = True
            return
        self._queue_ticket = ticket
        pod.spec.scheduling_gates = [*(pod.spec.scheduling_gates or []), V1PodSchedulingGate(name=QUEUE_GATE)]
        pod.metadata.annotations = {
            **(pod.metadata.annotations or {}),
            **queue_annotations(ticket.queued_at, ticket.priority, ticket.max_wait),
        }
        # KubeSpawner waits start_timeout for the pod to run: the wait in the queue comes first.
        self._queue_started_limit = max(1.0, self.start_timeout * 0.9)  # type: ignore[has-type]
        self.start_timeout = self.start_timeout + plan.max_wait  # type: ignore[has-type]
        self.log.info("fracnb: %s queued for %s", self._log_name, plan.ask.kind)  # type: ignore[attr-defined]

    async def form_queue_text(self, profiles: list[dict], key: Any, ask: Ask | None) -> str | None:
        """The form's "queue: 2 waiting, about 10 min" for a choice whose spawn would wait now, else None."""
        view = self._queue_view_now()
        slug = key[0]
        profile = next((p for p in profiles if p.get("slug") == slug), {})
        if view is None or ask is None or queue_max_wait(profile.get("queue")) <= 0:
            return None
        capacity = await shared_queue(view, self.api, self.log).capacity(ask)  # type: ignore[attr-defined]
        if capacity is None or (capacity.free > 0 and capacity.waiting == 0):
            return None
        now = datetime.now(timezone.utc)
        release = estimate(self._releases(ask.kind), capacity.waiting + 1, now)
        minutes = (release.at - now).total_seconds() / 60 if release else None
        return form_text(capacity.free, capacity.waiting, minutes)

    async def _view(self) -> Any:
        from .clusterview import shared_view  # noqa: PLC0415 - the view module imports this one's peers

        return shared_view(self.api, self.log)  # type: ignore[attr-defined]

    async def _await_started(self, inner: asyncio.Future) -> Any:
        """Wait for KubeSpawner's start: the queue's maximum wait while gated, 90 % of start_timeout after."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        lifted_seen = False
        while True:
            ticket = self._queue_ticket
            if ticket is not None and ticket.waiting:
                waited = (datetime.now(timezone.utc) - ticket.queued_at).total_seconds()
                remaining = ticket.max_wait - waited
                if remaining <= 0:
                    raise QueueTimeoutError
            else:
                if ticket is not None and not lifted_seen:
                    lifted_seen, began = True, loop.time()
                limit = self._queue_started_limit if lifted_seen else max(1.0, self.start_timeout * 0.9)  # type: ignore[has-type]
                remaining = began + (limit or 1.0) - loop.time()
                if remaining <= 0:
                    raise asyncio.TimeoutError
            done, _ = await asyncio.wait({inner}, timeout=min(remaining, PROGRESS_POLL_SECONDS))
            if done:
                return inner.result()

    async def _give_up_waiting(self) -> str:
        """Remove the queued pod after the maximum wait; the message to show."""
        ticket = self._queue_ticket
        GAVE_UP.labels(reason="max-wait").inc()
        with contextlib.suppress(Exception):
            await self.stop(now=True)  # type: ignore[attr-defined]
        return gave_up_message(self.fracnb_plan, ticket.max_wait if ticket else 0)  # type: ignore[attr-defined]

    def _leave_queue(self, *, cancelled: bool) -> None:
        ticket, self._queue_ticket = self._queue_ticket, None
        if ticket is not None and ticket.lifted.is_set():
            WAIT_SECONDS.observe(max(ticket.lifted_at - ticket.queued_at.timestamp(), 0.0))
        elif ticket is not None and cancelled:
            GAVE_UP.labels(reason="cancelled").inc()
        view = self._queue_view_now()
        if view is not None and self._queue_plan is not None:
            key = f"{self.namespace}/{self.pod_name}"  # type: ignore[attr-defined]
            shared_queue(view, self.api, self.log).forget(key, ticket)  # type: ignore[attr-defined]

    def _queue_view_now(self) -> Any:
        from .clusterview import _views  # noqa: PLC0415

        with contextlib.suppress(RuntimeError):
            return _views.get(id(asyncio.get_running_loop()))
        return None

    # ---- a hub restart while queued ------------------------------------------------------------

    async def poll(self) -> int | None:
        """KubeSpawner's poll, except that a pod waiting in the queue that no spawn of this hub process put
        there (the hub restarted) is not running. The restarted hub then forgets the spawn at once and, as
        it stops only servers that poll() says run, leaves the pod and its place for the user's next start
        (docs/queue.md). KubeSpawner alone says a pending pod runs: the hub would wait ``http_timeout`` for
        it to answer, then stop it, deleting the pod and its place."""
        status = await super().poll()  # type: ignore[misc]
        if status is None and self._queue_plan is None and self._pod_in_queue() is not None:
            return 0
        return status

    def _pod_in_queue(self) -> dict | None:
        """This server's pod from KubeSpawner's reflector, if it waits in the queue."""
        reflector = self.pod_reflector  # type: ignore[attr-defined]
        if reflector is None:  # not watching pods yet: nothing known
            return None
        pod = reflector.pods.get(f"{self.namespace}/{self.pod_name}")  # type: ignore[attr-defined]
        return pod if pod is not None and pod_is_gated(pod) else None

    def kept_place_text(self) -> str | None:
        """The spawn form's notice when this server's pod waits in the queue with no spawn waiting on it."""
        pod = self._pod_in_queue() if self._queue_ticket is None else None
        deadline = wait_deadline(pod) if pod is not None else None
        if deadline is None:
            return None
        return kept_place_message(self.fracnb_plan, deadline, datetime.now(timezone.utc), self.queue_settings().zone)  # type: ignore[attr-defined]

    # ---- progress ------------------------------------------------------------------------------

    def queue_hides_patience(self) -> bool:
        """Whether KubeSpawner's "taking longer than expected" would mislead: while the queue decides, while
        the spawn waits in it, and once its turn came (its clock counts the wait)."""
        return self._queue_plan is not None and not self._queue_went_straight

    def queue_status_text(self) -> str | None:
        """The progress headline while this spawn waits in the queue, else None."""
        ticket = self._queue_ticket
        if ticket is None or not ticket.waiting:
            return None
        release, now = None, datetime.now(timezone.utc)
        if ticket.position:
            release = estimate(self._releases(ticket.kind), ticket.position, now)
        zone = self.queue_settings().zone
        return queued_message(self.fracnb_plan, ticket.position, release, now, zone)  # type: ignore[attr-defined]

    def _releases(self, kind: str) -> list[Release]:
        """When servers holding slots of ``kind`` are due to be culled (idle or max age), from the hub's records."""
        view = self._queue_view_now()
        if view is None:
            return []
        releases = []
        for pod in view.pods.objects():
            metadata = pod.get("metadata") or {}
            if (metadata.get("labels") or {}).get(SLOT_KIND_LABEL) != kind or not pod["spec"].get("nodeName"):
                continue
            annotations = metadata.get("annotations") or {}
            activity = self._server_activity(
                annotations.get(USERNAME_ANNOTATION), annotations.get(SERVERNAME_ANNOTATION, "")
            )
            if activity is None:
                continue
            policy = policy_from_annotations(annotations, CullPolicy())
            decision = decide(activity, policy, now=datetime.now(timezone.utc), warning_lead=0)
            if decision.cull_at is not None and decision.reason is not None:
                fraction = format_gpus(parse_fraction(annotations.get("fracnb.io/gpu-fraction", "0")))
                releases.append(Release(decision.cull_at, decision.reason, fraction))
        return releases

    def _server_activity(self, user: str | None, server: str) -> ServerActivity | None:
        """A server's start and last activity from the hub's database; None when unknown."""
        if not user:
            return None
        try:
            from jupyterhub import orm  # noqa: PLC0415 - only inside a hub

            db = self.user.db  # type: ignore[attr-defined]
            row = db.query(orm.Spawner).join(orm.User).filter(orm.User.name == user, orm.Spawner.name == server).first()
        except Exception:  # a mock user, no database: no estimate
            return None
        if row is None or row.server is None:
            return None
        return ServerActivity(started=_utc(row.started), last_activity=_utc(row.last_activity), ready=True)

    async def queue_progress(self) -> AsyncIterator[dict]:
        """The queue headline whenever it changes, until the spawn stops waiting."""
        last = None
        while True:
            future = getattr(self, "_start_future", None)
            if future is not None and future.done():
                return
            text = self.queue_status_text()
            if text and text != last:
                last = text
                yield {"progress": 10, "message": text}
            await asyncio.sleep(PROGRESS_POLL_SECONDS)


def _utc(moment: datetime | None) -> datetime | None:
    if moment is None:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


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
