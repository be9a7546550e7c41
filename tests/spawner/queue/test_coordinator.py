"""The hub-wide GPU queue (QueueCoordinator) against a fake cluster, apiserver and clock: who goes straight
to the scheduler, who waits in which order, whose gate is lifted when a slot frees, and which places the
sweep ends. The same queue runs against the real apiserver and scheduler in tests/spawner_k8s/test_queue.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from fractions import Fraction

import pytest

from fracnb_spawner.queue.coordinator import ADMITTED_GRACE, SWEEP_SECONDS, QueueCoordinator, Ticket
from fracnb_spawner.quota.policy import QuotaPolicy
from fracnb_testbed.procs import wait_until_async
from tests.spawner.queue.fakes import T0, FakeApi, FakeClock, FakeCluster, ask, gated, gpu_pod, node, running

GATE_PATCH = [
    {"op": "test", "path": "/spec/schedulingGates", "value": [{"name": "fracnb.io/queue"}]},
    {"op": "remove", "path": "/spec/schedulingGates"},
]


def key(user: str) -> str:
    return f"jhub/jupyter-{user}"


class Queue:
    """One coordinator with its fake cluster, apiserver and clock, and the tickets of the spawns it saw."""

    def __init__(self, coordinator: QueueCoordinator, cluster: FakeCluster, api: FakeApi, clock: FakeClock) -> None:
        self.coordinator, self.cluster, self.api, self.clock = coordinator, cluster, api, clock
        self.changes: list[str] = []

    def ticket(
        self,
        user: str,
        *,
        units: int = 1,
        priority: int = 0,
        waited: float = 0,
        policy: QuotaPolicy | None = None,
        groups: dict[str, list[str]] | None = None,
    ) -> Ticket:
        """The ticket a spawn of ``user`` brings, queued ``waited`` seconds before now."""
        return Ticket(
            key=key(user), ask=ask(units), user=user, groups=groups or {}, priority=priority,
            queued_at=self.clock.now() - timedelta(seconds=waited), max_wait=600,
            policy=policy or QuotaPolicy(), on_change=lambda: self.changes.append(user),
        )  # fmt: skip

    async def spawn(self, user: str, **kwargs) -> Ticket:
        """What a spawn does: ask the queue, then create its pod, gated if it was queued."""
        ticket = self.ticket(user, **kwargs)
        straight = await self.coordinator.admit(ticket)
        units = ticket.ask.units
        # Straight to the scheduler, it has still to be placed; queued, it waits gated.
        self.cluster.add(gpu_pod(user, units=units) if straight else gated(user, ticket.queued_at, units=units))
        return ticket

    def place(self, *tickets: Ticket) -> list[int | None]:
        return [ticket.position for ticket in tickets]


@pytest.fixture
async def make_queue() -> AsyncIterator[Callable[..., Queue]]:
    """``make_queue(slots_per_node, ...)``: a queue over nodes of that many quarter slots. Its own loop is
    stopped: the tests call ``reconcile()`` and ``sweep()`` themselves, except where they test the loop."""
    made: list[QueueCoordinator] = []

    async def make(*slots: int, loop: bool = False) -> Queue:
        cluster = FakeCluster(*(node(f"gpu-{i}", n) for i, n in enumerate(slots)))
        api, clock = FakeApi(cluster), FakeClock()
        coordinator = QueueCoordinator(cluster, api, clock=clock)
        made.append(coordinator)
        if not loop:
            await coordinator.stop()
        return Queue(coordinator, cluster, api, clock)

    yield make
    for coordinator in made:
        await coordinator.stop()


# ---- admission -----------------------------------------------------------------------------------


async def test_with_a_free_slot_and_nobody_waiting_a_spawn_goes_straight_to_the_scheduler(make_queue) -> None:
    queue = await make_queue(2)
    ann = await queue.spawn("ann")
    assert not ann.gated
    assert queue.coordinator.tickets == {}
    assert queue.api.patches == []
    # On its way to the scheduler it holds its slot: the second spawn takes the last one, a third queues.
    assert (await queue.coordinator.capacity(ask())).free == 1
    assert not (await queue.spawn("bob")).gated
    assert (await queue.spawn("cat")).gated


async def test_without_a_free_slot_a_spawn_queues_and_is_told_its_place(make_queue) -> None:
    queue = await make_queue(1)
    queue.cluster.add(running("ann"))
    bob = await queue.spawn("bob")
    assert bob.gated
    assert bob.waiting
    assert queue.coordinator.tickets == {key("bob"): bob}
    await queue.coordinator.reconcile()
    assert (bob.position, bob.waiting_for_kind) == (1, 1)
    assert queue.changes == ["bob"]
    assert queue.api.patches == []
    capacity = await queue.coordinator.capacity(ask())
    assert (capacity.free, capacity.waiting) == (0, 1)


async def test_a_freed_slot_goes_to_the_head_of_the_queue_not_to_whoever_asks_next(make_queue) -> None:
    queue = await make_queue(1)
    queue.cluster.add(running("ann"))
    await queue.spawn("bob", waited=10)  # first in line
    queue.cluster.remove(key("ann"))  # a slot frees; before the queue acts on it, cat asks
    cat = await queue.spawn("cat")
    assert cat.gated, "someone waits for this kind: a new spawn queues behind them, free slot or not"
    await queue.coordinator.reconcile()
    assert queue.api.lifted() == ["jupyter-bob"]
    assert (cat.position, cat.waiting_for_kind) == (1, 1)


async def test_an_unreadable_cluster_or_a_slot_no_node_has_leaves_the_decision_to_the_scheduler(make_queue) -> None:
    queue = await make_queue(1)
    queue.cluster.add(running("ann"))
    queue.cluster.readable = False
    assert not (await queue.spawn("bob")).gated
    queue.cluster.readable = True
    assert not (await queue.spawn("cat", units=2)).gated  # no node has 2 slots: waiting would never end
    assert queue.coordinator.tickets == {}


async def test_a_spawn_of_a_pod_already_waiting_takes_over_its_place(make_queue) -> None:
    """A hub restart: the gated pod outlived the spawn that made it; the user's new spawn keeps its place."""
    queue = await make_queue(1)
    queue.cluster.add(gated("ann", T0 - timedelta(minutes=20), priority=5))
    ann = queue.ticket("ann")
    assert not await queue.coordinator.admit(ann), "a free slot, but the pod already waits: the spawn queues with it"
    assert queue.coordinator.tickets == {ann.key: ann}
    assert (ann.queued_at, ann.priority) == (T0 - timedelta(minutes=20), 5)


# ---- order ---------------------------------------------------------------------------------------


async def test_the_order_is_priority_then_the_smaller_quota_share_then_arrival(make_queue) -> None:
    queue = await make_queue(1)
    queue.cluster.add(running("dan", server="big", fraction="1"))  # dan holds 1 of his 2 GPUs; the others none
    policy = QuotaPolicy(default_user=Fraction(2))
    tickets = {
        "dan": await queue.spawn("dan", waited=300, policy=policy),  # first come, but holds half his quota
        "eve": await queue.spawn("eve", waited=200, policy=policy),  # holds nothing
        "fay": await queue.spawn("fay", waited=100, policy=policy),  # holds nothing, came later
        "vip": await queue.spawn("vip", waited=0, priority=10, policy=policy),  # came last, priority
    }
    await queue.coordinator.reconcile()
    places = {user: ticket.position for user, ticket in tickets.items()}
    assert places == {"vip": 1, "eve": 2, "fay": 3, "dan": 4}
    assert {ticket.waiting_for_kind for ticket in tickets.values()} == {4}


async def test_leaving_the_queue_moves_those_behind_up(make_queue) -> None:
    queue = await make_queue(1)
    queue.cluster.add(running("ann"))
    bob, cat, dan = [await queue.spawn(user, waited=30 - i) for i, user in enumerate(("bob", "cat", "dan"))]
    await queue.coordinator.reconcile()
    assert queue.place(bob, cat, dan) == [1, 2, 3]
    queue.coordinator.forget(bob.key, bob)  # bob cancelled
    queue.cluster.remove(bob.key)
    await queue.coordinator.reconcile()
    assert queue.place(cat, dan) == [1, 2]
    assert cat.waiting_for_kind == 2


# ---- lifting -------------------------------------------------------------------------------------


async def test_a_freed_slot_lifts_the_heads_gate_and_tells_its_spawn(make_queue) -> None:
    queue = await make_queue(1)
    queue.cluster.add(running("ann"))
    bob = await queue.spawn("bob")
    await queue.coordinator.reconcile()
    queue.clock.advance(90)
    queue.cluster.remove(key("ann"))
    await queue.coordinator.reconcile()
    assert queue.api.patches == [("jhub", "jupyter-bob", GATE_PATCH)]
    assert bob.lifted.is_set()
    assert not bob.waiting
    assert bob.lifted_at == (T0 + timedelta(seconds=90)).timestamp()
    assert not queue.cluster.is_gated(bob.key)
    # Lifted but not yet bound, it holds the slot: the next change lifts nobody else.
    cat = await queue.spawn("cat")
    await queue.coordinator.reconcile()
    assert queue.api.lifted() == ["jupyter-bob"]
    assert cat.position == 1


async def test_a_lifted_spawn_holds_its_slot_while_the_watch_still_shows_its_gate(make_queue) -> None:
    queue = await make_queue(1)
    queue.cluster.add(running("ann"))
    bob = await queue.spawn("bob")
    queue.api.watch_lags = True
    queue.cluster.remove(key("ann"))
    await queue.coordinator.reconcile()
    assert bob.lifted.is_set()
    assert queue.cluster.is_gated(bob.key)
    assert (await queue.coordinator.capacity(ask())).free == 0
    assert (await queue.spawn("cat")).gated


async def test_lifting_is_strict_nobody_passes_a_head_that_does_not_fit(make_queue) -> None:
    queue = await make_queue(4)
    queue.cluster.add(*(running(f"held-{i}") for i in range(4)))
    big = await queue.spawn("big", units=2, waited=60)  # first in line, wants two slots of the node
    small = await queue.spawn("small", units=1, waited=30)
    queue.cluster.remove(key("held-0"))  # one slot free: the small one would fit, the big one not
    await queue.coordinator.reconcile()
    assert queue.api.patches == []
    assert queue.place(big, small) == [1, 2]
    queue.cluster.remove(key("held-1"))  # two free: the big one goes, the small one is now first
    await queue.coordinator.reconcile()
    assert queue.api.lifted() == ["jupyter-big"]
    assert (small.position, small.waiting_for_kind) == (1, 1)
    queue.cluster.bind(big.key)
    queue.cluster.remove(key("held-2"))
    await queue.coordinator.reconcile()
    assert queue.api.lifted() == ["jupyter-big", "jupyter-small"]


async def test_several_free_slots_lift_as_many_heads_in_order(make_queue) -> None:
    queue = await make_queue(2, 2)
    queue.cluster.add(*(running(f"held-{i}", f"gpu-{i % 2}") for i in range(4)))
    waiting = [await queue.spawn(user, waited=10 - i) for i, user in enumerate(("a", "b", "c", "d"))]
    for i in range(3):
        queue.cluster.remove(key(f"held-{i}"))
    await queue.coordinator.reconcile()
    assert queue.api.lifted() == ["jupyter-a", "jupyter-b", "jupyter-c"]
    assert (waiting[3].position, waiting[3].waiting_for_kind) == (1, 1)


async def test_a_lift_of_a_pod_not_created_yet_is_tried_again_once_it_is(make_queue) -> None:
    queue = await make_queue(1)
    queue.cluster.add(running("ann"))
    bob = queue.ticket("bob")
    assert not await queue.coordinator.admit(bob)  # queued; its pod is being created
    queue.cluster.remove(key("ann"))
    await queue.coordinator.reconcile()
    assert queue.api.lifted() == ["jupyter-bob"]  # answered 404
    assert not bob.lifted.is_set()
    assert bob.waiting
    queue.cluster.add(gated("bob", bob.queued_at))
    await queue.coordinator.reconcile()
    assert queue.api.lifted() == ["jupyter-bob", "jupyter-bob"]
    assert bob.lifted.is_set()
    assert not queue.cluster.is_gated(bob.key)


# ---- what is on its way to the scheduler ----------------------------------------------------------


async def test_an_admitted_spawn_holds_its_slot_until_bound_or_for_a_grace_period(make_queue) -> None:
    queue = await make_queue(2)
    ann = await queue.spawn("ann")
    assert (await queue.coordinator.capacity(ask())).free == 1
    queue.cluster.bind(ann.key)  # bound: the node's own count leaves it out now
    assert (await queue.coordinator.capacity(ask())).free == 1
    assert queue.coordinator.admitted == {}
    # An admitted spawn whose pod never shows up holds its slot for ADMITTED_GRACE seconds, not longer.
    assert await queue.coordinator.admit(queue.ticket("bob"))
    queue.clock.advance(ADMITTED_GRACE - 1)
    assert (await queue.coordinator.capacity(ask())).free == 0
    queue.clock.advance(2)
    assert (await queue.coordinator.capacity(ask())).free == 1


# ---- the sweep -----------------------------------------------------------------------------------


async def test_the_sweep_deletes_the_pods_past_their_wait_that_no_spawn_waits_on(make_queue) -> None:
    queue = await make_queue(1)
    queue.cluster.add(
        running("ann"),
        gated("old", T0 - timedelta(minutes=11), max_wait=600),  # waited past its 10 min, its spawn gone
        gated("recent", T0 - timedelta(minutes=9), max_wait=600),  # still within its wait
    )
    held = await queue.spawn("held", waited=900)  # past its wait too, but its spawn still waits on it
    await queue.coordinator.sweep()
    assert queue.api.deletes == [("jhub", "jupyter-old", 0)]
    assert set(queue.cluster.pods) == {key("ann"), key("recent"), held.key}
    queue.clock.advance(61)
    await queue.coordinator.sweep()
    assert [name for _ns, name, _grace in queue.api.deletes] == ["jupyter-old", "jupyter-recent"]


def kueue_gated(user: str, queued_at: datetime) -> dict:
    """A pod the kueue engine left waiting on Kueue's gate, with the queue's annotations."""
    made = gated(user, queued_at)
    made["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    return made


async def test_the_sweep_deletes_a_pod_left_waiting_on_kueue_past_its_wait(make_queue) -> None:
    queue = await make_queue(1)
    queue.cluster.add(
        kueue_gated("left", T0 - timedelta(minutes=11)),  # nobody resumed its spawn (its user deleted, say)
        kueue_gated("waits", T0 - timedelta(minutes=9)),
    )
    await queue.coordinator.sweep()
    assert queue.api.deletes == [("jhub", "jupyter-left", 0)]


async def test_the_queues_own_loop_lifts_on_a_change_and_sweeps_on_its_schedule(make_queue) -> None:
    queue = await make_queue(1, loop=True)
    queue.cluster.add(running("ann"), gated("old", T0 - timedelta(minutes=11), max_wait=600))  # past its wait
    bob = await queue.spawn("bob")
    await wait_until_async(lambda: bob.position == 1, what="bob's place", timeout=5, interval=0.01)
    queue.cluster.remove(key("ann"))  # the change wakes the loop
    await wait_until_async(bob.lifted.is_set, what="bob's gate lifted", timeout=5, interval=0.01)
    assert queue.api.deletes == [], "no sweep before it is due"
    queue.clock.advance(SWEEP_SECONDS)  # the next change after the sweep is due also sweeps
    queue.cluster.view.changed.set()
    await wait_until_async(lambda: queue.api.deletes, what="the sweep", timeout=5, interval=0.01)
    assert queue.api.deletes == [("jhub", "jupyter-old", 0)]
