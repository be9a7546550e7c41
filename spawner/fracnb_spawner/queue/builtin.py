"""fracnb's own queue engine (``c.FracnbQueue.engine = "builtin"``): a spawn's place is a coordinator
:class:`.coordinator.Ticket`. The hub-wide :class:`.coordinator.QueueCoordinator` lets the spawn's pod go to the
scheduler now, or the pod is created with fracnb's gate, which the coordinator lifts in queue order."""

from __future__ import annotations

from datetime import timedelta
from fractions import Fraction
from typing import Any

from kubernetes_asyncio.client.models import V1PodSchedulingGate

from fracnb_spawner.borrowing.decide import borrowed_pod
from fracnb_spawner.borrowing.queued import queue_borrowable
from fracnb_spawner.cluster.slots import Ask
from fracnb_spawner.common.podkeys import QUEUE_GATE
from fracnb_spawner.queue.coordinator import QueueCoordinator, Ticket
from fracnb_spawner.queue.engine import Spawn, Status
from fracnb_spawner.queue.metrics import WAIT_SECONDS
from fracnb_spawner.queue.order import queue_annotations
from fracnb_spawner.queue.releases import estimate
from fracnb_spawner.queue.text import form_text, queued_message

PROGRESS_POLL_SECONDS = 1.0  # the coordinator lifts the gate and sets the ticket's event: no need to look sooner


class BuiltinPlace:
    """A spawn's ticket in the coordinator's queue (None while it went straight to the scheduler)."""

    poll_seconds = PROGRESS_POLL_SECONDS

    def __init__(self, spawn: Spawn, coordinator: QueueCoordinator) -> None:
        self.spawn = spawn
        self.coordinator = coordinator
        self.ticket: Ticket | None = None
        self.went_borrowing: Ask | None = None  # the borrowable pool's ask it went to the scheduler with at once

    @property
    def borrowed(self) -> Ask | None:
        """The borrowable pool's ask its pod went to the scheduler with, at once or when its turn came."""
        ticket = self.ticket
        if ticket is not None and ticket.borrow is not None and ticket.went is ticket.borrow.ask:
            return ticket.went
        return self.went_borrowing

    async def join(self, pod: Any) -> bool:
        spawn, host = self.spawn, self.spawn.host
        ask = spawn.ask
        ticket = Ticket(
            key=spawn.key, ask=ask, user=host.user.name, groups=spawn.groups(), priority=spawn.priority(),
            queued_at=spawn.clock.now(), max_wait=spawn.max_wait, policy=host.quota_policy(),
        )  # fmt: skip
        borrow = spawn.borrow
        went = await self.coordinator.admit(ticket, borrow.ask if borrow is not None else None)
        if went is not None:
            if borrow is not None and went is borrow.ask:  # its own pool is full: it starts on a borrowed card
                borrowed_pod(pod, borrow)
                self.went_borrowing = borrow.ask
                host.log.info("fracnb: %s borrows a card (%s; its own %s is full)", spawn.key, went.kind, ask.kind)
            return False
        self.ticket = ticket
        if borrow is not None:  # it may still borrow when its turn comes (fracnb_spawner.borrowing.queued)
            ticket.borrow, ticket.own_selector = borrow, queue_borrowable(pod, borrow)
        pod.spec.scheduling_gates = [*(pod.spec.scheduling_gates or []), V1PodSchedulingGate(name=QUEUE_GATE)]
        pod.metadata.annotations = {
            **(pod.metadata.annotations or {}),
            **queue_annotations(ticket.queued_at, ticket.priority, ticket.max_wait),
        }
        host.log.info("fracnb: %s queued for %s", spawn.key, ask.kind)
        return True

    def waiting(self, pod: dict | None) -> bool:
        return self.ticket is not None and self.ticket.waiting

    def remaining(self) -> float:
        ticket = self.ticket
        if ticket is None:
            return 0.0
        return ticket.max_wait - (self.spawn.clock.now() - ticket.queued_at).total_seconds()

    def status(self) -> Status | None:
        ticket, spawn = self.ticket, self.spawn
        if ticket is None:
            return None
        release, now = None, spawn.clock.now()
        if ticket.position:
            gives_up_at = ticket.queued_at + timedelta(seconds=ticket.max_wait)
            release = estimate(spawn.releases(ticket.kind, now), ticket.position, now, gives_up_at)
        zone = spawn.host.queue_settings().zone
        return queued_message(spawn.plan, ticket.position, release, now, zone), [release.at] if release else []

    async def refresh(self, pod: dict | None) -> None:
        return None  # the coordinator keeps the ticket's position itself

    def pod_created(self) -> None:
        """A place taken over from a gated pod of the same name may be lifted now."""
        ticket = self.ticket
        if ticket is not None and ticket.replacing:
            ticket.replacing = False
            self.coordinator.view.changed.set()

    def counts_the_spawn(self) -> bool:
        return self.ticket is not None

    async def take_over(self, wanted: Any) -> tuple[Any, str] | None:
        return None  # the pod is replaced; the coordinator keeps the place itself (a kept place)

    def leave(self, *, cancelled: bool, pod: dict | None) -> bool:
        ticket = self.ticket
        self.coordinator.forget(self.spawn.key, ticket)
        if ticket is None:
            return False
        if ticket.lifted.is_set():
            WAIT_SECONDS.observe(max(ticket.lifted_at - ticket.queued_at.timestamp(), 0.0))
            return False
        return cancelled


class BuiltinEngine:
    """fracnb's own queue: a spawn with a slot kind to wait for gets a ticket."""

    name = "builtin"
    counts_resource_requests = False
    preempts = False
    kueue_objects = False

    def place(self, spawn: Spawn, coordinator: QueueCoordinator) -> BuiltinPlace | None:
        return BuiltinPlace(spawn, coordinator) if spawn.ask is not None else None

    async def form_text(
        self, spawn: Spawn, coordinator: QueueCoordinator, ask: Ask, max_wait: float, fraction: Fraction
    ) -> str | None:
        capacity = await coordinator.capacity(ask)
        if capacity is None or (capacity.free > 0 and capacity.waiting == 0):
            return None
        now = spawn.clock.now()
        release = estimate(spawn.releases(ask.kind, now), capacity.waiting + 1, now, now + timedelta(seconds=max_wait))
        minutes = (release.at - now).total_seconds() / 60 if release else None
        return form_text(capacity.free, capacity.waiting, minutes)

    def local_queue_template(self, settings: Any) -> str | None:
        return None
