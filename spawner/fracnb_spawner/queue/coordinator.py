"""The hub-wide GPU queue: admits a spawn at once or queues it, and lifts gates in queue order.

One coordinator per hub process (:class:`fracnb_spawner.hubstate.HubState`), beside the hub-wide
watches it reads (:mod:`fracnb_spawner.cluster.watches`): every change of nodes or pods (a server
stopped, a pod bound) wakes it, and it lifts the ``fracnb.io/queue`` scheduling gate of as many
queued pods, in :func:`.order.queue_order`, as there are free slots of their kind. A new spawn
goes straight to the scheduler only when nobody waits for its kind and a slot is free, so a
freed slot goes to the head of the queue, not to whoever clicks next.

The queue lives on the pods. This process only lifts the gates of spawns it is waiting on
(tickets). After a hub restart, gated pods no spawn waits on (kept places) keep their place
in the order: a spawn behind one does not start before it, and a slot that fits the kept place
is held for it. The fracnb service starts their spawns again (:mod:`fracnb_spawner.service.resume`);
the new spawn takes over the place. A kept place nobody resumes is deleted when its maximum
wait ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from fracnb_spawner.borrowing.decide import Borrow
from fracnb_spawner.borrowing.queued import lift_operations
from fracnb_spawner.cluster.slots import Ask, Cluster, Ledger, servers_free
from fracnb_spawner.cluster.view import object_key
from fracnb_spawner.cluster.watches import ClusterWatches
from fracnb_spawner.common.clock import SYSTEM_CLOCK, Clock
from fracnb_spawner.common.podkeys import SLOT_KIND_LABEL, USERNAME_ANNOTATION, has_queue_gate, is_waiting
from fracnb_spawner.queue.order import Waiting, queue_order, quota_share, wait_deadline, waiting_from_pod
from fracnb_spawner.quota.policy import QuotaPolicy, allocations_from_pods

SWEEP_SECONDS = 30  # how often expired places of spawns nobody waits on are looked for
ADMITTED_GRACE = 60.0  # seconds an admitted pod may take to show up in the watch

default_log = logging.getLogger("fracnb.queue")


@dataclass
class Ticket:
    """One spawn's claim on a slot kind, held by its spawner while the spawn waits."""

    key: str  # "namespace/pod"
    ask: Ask  # its slot kind, and what one server takes (:mod:`.slots`)
    user: str
    groups: Mapping[str, Iterable[str]]
    priority: int
    queued_at: datetime
    max_wait: float
    policy: QuotaPolicy = field(default_factory=QuotaPolicy)
    gated: bool = False
    position: int | None = None
    waiting_for_kind: int = 0  # queued spawns of this kind, this one included
    lifted: asyncio.Event = field(default_factory=asyncio.Event)
    lifted_at: float = 0.0  # epoch seconds
    on_change: Callable[[], None] = lambda: None
    # It took over the place of a gated pod of the same name (a hub restart), which its spawn replaces with a
    # pod of its own: until that exists, the place holds its slot but its gate is not lifted (the old pod's is
    # not this spawn's to lift).
    replacing: bool = False
    # A borrowing option (fracnb_spawner.borrowing.queued): its pod was created to start on either pool, and
    # ``own_selector`` is its own pool's node selector; ``went`` is the ask its gate was lifted for.
    borrow: Borrow | None = None
    own_selector: Mapping[str, str] = field(default_factory=dict)
    went: Ask | None = None

    @property
    def kind(self) -> str:
        return self.ask.kind

    @property
    def waiting(self) -> bool:
        return self.gated and not self.lifted.is_set()


@dataclass(frozen=True)
class KindCapacity:
    """What the spawn form shows for a slot kind: free slots now, and how many wait."""

    free: int
    waiting: int


class QueueCoordinator:
    def __init__(
        self,
        watches: ClusterWatches,
        api: Any,
        log: logging.Logger | logging.LoggerAdapter = default_log,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``watches``: what it reads of the cluster (``.view``, ``.read()``, ``.device_view()``); ``api``: a
        ``CoreV1Api`` it patches gates and deletes pods with; ``clock``: where it reads the time."""
        self.watches, self.view, self.api, self.log, self.clock = watches, watches.view, api, log, clock
        self.lock = asyncio.Lock()
        self.tickets: dict[str, Ticket] = {}
        self.admitted: dict[str, tuple[Ask, float]] = {}  # key -> ask, monotonic time admitted
        self.devices_changed: asyncio.Task | None = None  # wakes the queue on ResourceSlice/claim changes
        self.stopping = False
        self.task = asyncio.ensure_future(self._run())

    # ---- spawns --------------------------------------------------------------------------------

    async def admit(self, ticket: Ticket, borrow: Ask | None = None) -> Ask | None:
        """The ask the spawn's pod may go to the scheduler with now: its own (``ticket.ask``), or ``borrow`` (a
        borrowable pool's, :mod:`fracnb_spawner.borrowing`) when its own would queue and that pool has room now;
        None: it queues (its pod is created gated)."""
        async with self.lock:
            cluster = await self._cluster(devices=ticket.ask.needs_devices, wait=True)
            if cluster is None or not ticket.ask.could_ever_fit(cluster):
                # The hub cannot see the cluster, or no node could ever take it: the scheduler decides,
                # as without a queue (waiting for a slot that cannot exist helps nobody).
                return ticket.ask
            adopted = self._adopt(ticket, cluster.pods)
            for ask in (ticket.ask, borrow):
                if ask is None or adopted:
                    continue
                seen = cluster if ask.needs_devices == ticket.ask.needs_devices else None
                seen = seen or await self._cluster(devices=ask.needs_devices, wait=True)
                if seen is not None and self._room_for(ask, seen, besides=ticket.key):
                    self.admitted[ticket.key] = (ask, self.clock.monotonic())
                    return ask
            ticket.gated = True
            self.tickets[ticket.key] = ticket
        self.view.changed.set()  # place it (and perhaps start it) at once
        return None

    def _room_for(self, ask: Ask, cluster: Cluster, *, besides: str) -> bool:
        """Whether a new spawn of ``ask`` may start now: nobody waits for its kind (a spawn of this process or a kept
        place) and it fits beside what is on its way to the scheduler."""
        others = [t for t in self.tickets.values() if t.kind == ask.kind and t.waiting]
        kept = self._kept_places(ask, cluster.pods, besides=besides)
        return not others and not kept and self._ledger(ask, cluster).take(ask)

    def _adopt(self, ticket: Ticket, pods: list[dict[str, Any]]) -> bool:
        """A gated pod of the same name that no spawn waits on (a hub restart): take over its place. Only fracnb's
        own gate: a place in Kueue's queue is Kueue's to keep (``SpawnQueue.take_over_kept_pod``)."""
        pod = next((p for p in pods if object_key(p) == ticket.key and has_queue_gate(p)), None)
        waiting = waiting_from_pod(pod, Fraction(0)) if pod is not None else None
        if waiting is None or ticket.key in self.tickets:
            return False
        ticket.queued_at, ticket.priority, ticket.replacing = waiting.queued_at, waiting.priority, True
        return True

    def _kept_places(self, ask: Ask, pods: list[dict[str, Any]], *, besides: str = "") -> list[Ticket]:
        """Gated pods of ``ask``'s kind that no spawn of this process waits on (a hub restart), as tickets
        nobody holds: they keep their place in the order until their spawn resumes. Only fracnb's own gate: a pod
        on Kueue's gate waits for its team's quota, not for a slot this queue gives."""
        kept, now = [], self.clock.now()
        for pod in pods:
            key = object_key(pod)
            if key == besides or key in self.tickets or _kind_of(pod) != ask.kind or not has_queue_gate(pod):
                continue
            waiting, deadline = waiting_from_pod(pod, Fraction(0)), wait_deadline(pod)
            if waiting is None or (deadline is not None and deadline <= now):
                continue  # unreadable, or past its maximum wait (the sweep deletes it)
            user = ((pod.get("metadata") or {}).get("annotations") or {}).get(USERNAME_ANNOTATION, "")
            place = Ticket(key, ask.of_pod(pod), user, {}, waiting.priority, waiting.queued_at, 0, gated=True)
            kept.append(place)
        return kept

    def forget(self, key: str, ticket: Ticket | None) -> None:
        """The spawn of pod ``key`` ended (started, failed or was cancelled): it no longer holds a place,
        and its pod, if any, now counts as what it is (bound, or gone)."""
        self.admitted.pop(key, None)
        if ticket is not None and self.tickets.get(ticket.key) is ticket:
            del self.tickets[ticket.key]
            self.view.changed.set()  # positions behind it move up

    async def capacity(self, ask: Ask) -> KindCapacity | None:
        """Servers of ``ask`` that fit now and spawns waiting for its kind (kept places too); None while the cluster
        is unreadable."""
        cluster = await self._cluster(devices=ask.needs_devices, wait=False)
        if cluster is None:
            return None
        waiting = sum(1 for t in self.tickets.values() if t.kind == ask.kind and t.waiting)
        waiting += len(self._kept_places(ask, cluster.pods))
        return KindCapacity(servers_free(ask, cluster, self._in_flight(ask, cluster)), waiting)

    # ---- capacity ------------------------------------------------------------------------------

    async def _cluster(self, *, devices: bool, wait: bool) -> Cluster | None:
        if devices and (self.devices_changed is None or self.devices_changed.done()):
            dra = self.watches.device_view()
            self.devices_changed = asyncio.ensure_future(_forward(dra.changed, self.view.changed))
        return await self.watches.read(devices=devices, wait=wait)

    def _in_flight(self, ask: Ask, cluster: Cluster) -> list[Ask]:
        """Servers of ``ask``'s kind given out but not yet placed: admitted, lifted or ungated pods the
        scheduler has still to place (bound, for a device plugin; its claim allocated, for DRA). Only fracnb's own
        gate keeps a pod out of this count: a pod on Kueue's gate (a site whose Kueue takes every pod of the
        namespace) may be admitted at any moment, and then the scheduler places it, so it counts as on its way."""
        kind = ask.kind
        seen = {object_key(p): p for p in cluster.pods if _kind_of(p) == kind}
        known = {key: admitted for key, (admitted, _at) in self.admitted.items()}
        known.update({ticket.key: ticket.went or ticket.ask for ticket in self.tickets.values()})
        asks = []
        for key, pod in seen.items():
            if not has_queue_gate(pod) and not ask.placed(pod, cluster):
                asks.append(known.get(key) or ask.of_pod(pod))
        now = self.clock.monotonic()
        for key, (admitted, at) in list(self.admitted.items()):
            pod = seen.get(key)
            if (pod is not None and ask.placed(pod, cluster)) or now - at > ADMITTED_GRACE:
                del self.admitted[key]
            elif admitted.kind == kind and (pod is None or has_queue_gate(pod)):
                asks.append(admitted)
        for ticket in self.tickets.values():
            pod = seen.get(ticket.key)
            went = ticket.went or ticket.ask
            if went.kind == kind and ticket.lifted.is_set() and (pod is None or has_queue_gate(pod)):
                asks.append(went)  # lifted, the watch not yet caught up
        return asks

    def _ledger(self, ask: Ask, cluster: Cluster) -> Ledger:
        """The free capacity of ``ask``'s kind, less what is on its way to the scheduler."""
        ledger = ask.ledger(cluster)
        for other in self._in_flight(ask, cluster):
            ledger.take(other)
        return ledger

    # ---- lifting gates -------------------------------------------------------------------------

    async def _run(self) -> None:
        next_sweep = self.clock.monotonic() + SWEEP_SECONDS
        while not self.stopping:
            # asyncio.wait, not wait_for: wait_for may swallow a cancellation that races a set event.
            waiter = asyncio.ensure_future(self.view.changed.wait())
            try:
                await asyncio.wait({waiter}, timeout=max(next_sweep - self.clock.monotonic(), 0.1))
            finally:
                waiter.cancel()
            self.view.changed.clear()
            try:
                await self.reconcile()
                if self.clock.monotonic() >= next_sweep:
                    next_sweep = self.clock.monotonic() + SWEEP_SECONDS
                    await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:  # the next change tries again; a spawn past its wait fails on its own
                self.log.exception("fracnb: the GPU queue could not be updated")
                await asyncio.sleep(1)

    async def reconcile(self) -> None:
        """Give free slots to the heads of the queues, and tell each waiting spawn its place."""
        async with self.lock:
            by_kind: dict[str, list[Ticket]] = {}
            for ticket in self.tickets.values():
                if ticket.waiting:
                    by_kind.setdefault(ticket.kind, []).append(ticket)
            clusters = {
                devices: await self._cluster(devices=devices, wait=False)
                for devices in {t.ask.needs_devices for tickets in by_kind.values() for t in tickets}
            }
            to_lift: list[tuple[Ticket, Ask]] = []
            borrowing = Borrowing(self, by_kind)
            for tickets in by_kind.values():
                cluster = clusters[tickets[0].ask.needs_devices]
                if cluster is None:
                    continue  # unreadable now: the next change tries again
                allocations = allocations_from_pods(p for p in cluster.pods if p["spec"].get("nodeName"))
                order = _ordered([*tickets, *self._kept_places(tickets[0].ask, cluster.pods)], allocations)
                ledger = self._ledger(order[0].ask, cluster)
                # Strict order within a kind: nobody starts before a spawn ahead of them that does not fit.
                # A kept place that fits holds its slot until its spawn resumes and its new pod exists.
                starting = 0
                for ticket in order:
                    went = ticket.ask if ledger.take(ticket.ask) else await borrowing.take(ticket)
                    if went is None:
                        break
                    if ticket.key in self.tickets and not ticket.replacing:
                        to_lift.append((ticket, went))
                    starting += 1
                for position, ticket in enumerate(order[starting:], start=1):
                    _place(ticket, position, len(order) - starting)
        for ticket, went in to_lift:
            await self._lift(ticket, went)

    async def _lift(self, ticket: Ticket, went: Ask | None = None) -> None:
        namespace, name = ticket.key.split("/", 1)
        borrowing = went is not None and went is not ticket.ask
        patch = lift_operations(ticket.own_selector, ticket.borrow, borrowing)
        ticket.went = went or ticket.ask
        ticket.lifted.set()
        ticket.lifted_at = self.clock.now().timestamp()
        try:
            await self.api.patch_namespaced_pod(name, namespace, patch)
        except ApiException as error:
            if error.status == 404:
                if self.tickets.get(ticket.key) is ticket:
                    # Its spawn still waits: the pod is not created yet (a slot freed between the spawn
                    # joining the queue and its pod's creation). The pod's arrival in the watch tries again.
                    ticket.lifted.clear()
                return  # else cancelled meanwhile
            ticket.lifted.clear()  # try again on the next change
            # The chart's Role lacks patch on pods: say which rule, as the dra claims' 403 does.
            missing = (
                f" (the hub needs patch on pods in {namespace}: the Role fracnb-hub-pod-patch of helm-values/rbac.yaml)"
                if error.status == 403
                else ""
            )
            self.log.warning("fracnb: could not lift the queue gate of %s: %s%s", ticket.key, error.reason, missing)
            return
        self.log.info("fracnb: %s's turn in the GPU queue (%s)", ticket.key, ticket.went.kind)
        ticket.on_change()

    async def sweep(self) -> None:
        """Delete gated pods that no spawn waits on once their maximum wait is over (no orphan is left), those
        waiting on Kueue's gate too (with the kueue engine a spawn holds no ticket, and ends at its maximum wait)."""
        _nodes, pods = await self.view.snapshot(wait=0)
        now = self.clock.now()
        for pod in pods:
            key = object_key(pod)
            deadline = wait_deadline(pod)
            if key in self.tickets or not is_waiting(pod) or deadline is None or deadline > now:
                continue
            namespace, name = key.split("/", 1)
            self.log.info(
                "fracnb: %s waited past its maximum in the GPU queue (%s) with no spawn; deleting it", key, deadline
            )
            with contextlib.suppress(ApiException):
                await self.api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)

    async def stop(self) -> None:
        self.stopping = True
        tasks = [task for task in (self.task, self.devices_changed) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Borrowing:
    """One reconcile's borrowable pools: a queued spawn whose own pool is full starts on its borrowing option
    when that pool has room now and no spawn waits for that pool's own kind (its own spawns come first)."""

    def __init__(self, coordinator: QueueCoordinator, waiting: Mapping[str, list[Ticket]]) -> None:
        self.coordinator, self.waiting = coordinator, waiting
        self.ledgers: dict[str, Ledger | None] = {}

    async def take(self, ticket: Ticket) -> Ask | None:
        """The borrowing option's ask when it may start there now (its room taken); None: it waits."""
        borrow = ticket.borrow
        if borrow is None or borrow.ask.kind in self.waiting:
            return None
        kind = borrow.ask.kind
        if kind not in self.ledgers:
            cluster = await self.coordinator._cluster(devices=borrow.ask.needs_devices, wait=False)
            kept = cluster is not None and self.coordinator._kept_places(borrow.ask, cluster.pods)
            self.ledgers[kind] = None if cluster is None or kept else self.coordinator._ledger(borrow.ask, cluster)
        ledger = self.ledgers[kind]
        return borrow.ask if ledger is not None and ledger.take(borrow.ask) else None


async def _forward(source: asyncio.Event, target: asyncio.Event) -> None:
    """Set ``target`` whenever ``source`` is set (ResourceSlice and claim changes wake the queue too)."""
    while True:
        await source.wait()
        source.clear()
        target.set()


def _place(ticket: Ticket, position: int, waiting: int) -> None:
    place = position or None
    if (ticket.position, ticket.waiting_for_kind) != (place, waiting):
        ticket.position, ticket.waiting_for_kind = place, waiting
        ticket.on_change()


def _ordered(tickets: list[Ticket], allocations: list) -> list[Ticket]:
    by_key = {t.key: t for t in tickets}
    waiting = [
        Waiting(t.key, t.priority, quota_share(t.policy, allocations, user=t.user, groups=t.groups), t.queued_at)
        for t in tickets
    ]
    return [by_key[w.key] for w in queue_order(waiting)]


def _kind_of(pod: Mapping[str, Any]) -> str | None:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(SLOT_KIND_LABEL)
