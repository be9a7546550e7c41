"""The hub's GPU queue with a borrowing option (QueueCoordinator.admit), against the fake cluster of
tests/spawner/queue: a spawn whose own pool is full starts on the borrowable pool when that has room now, and
queues on its own pool when the borrowable cards are held, by batch pods too (it never preempts there)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fracnb_spawner.borrowing.decide import without_preemption
from fracnb_spawner.cluster.slots import ResourceAsk, slot_kind
from fracnb_spawner.queue.coordinator import QueueCoordinator, Ticket
from tests.spawner.queue.fakes import RESOURCE, SELECTOR, FakeApi, FakeClock, FakeCluster, gpu_pod

DEV = {**SELECTOR, "fracnb.io/pool": "dev"}
TRAINING = {**SELECTOR, "fracnb.io/pool": "training"}
OWN = ResourceAsk(slot_kind(RESOURCE, DEV), RESOURCE, DEV, 1)
BORROW = without_preemption(ResourceAsk(slot_kind(RESOURCE, TRAINING), RESOURCE, TRAINING, 1))


def node(name: str, labels: dict[str, str], units: int) -> dict:
    return {"metadata": {"name": name, "labels": labels}, "spec": {}, "status": {"allocatable": {RESOURCE: str(units)}}}


def holding(name: str, node_name: str, kind: str, units: int, priority: int = 0) -> dict:
    made = gpu_pod(name, units=units)
    made["metadata"]["labels"]["fracnb.io/slot-kind"] = kind
    made["spec"].update(nodeName=node_name, priority=priority)
    made["status"]["phase"] = "Running"
    return made


@pytest.fixture
async def queue() -> tuple[QueueCoordinator, FakeCluster, FakeClock]:
    cluster = FakeCluster(node("dev-0", DEV, 4), node("train-0", TRAINING, 4))
    clock = FakeClock()
    coordinator = QueueCoordinator(cluster, FakeApi(cluster), clock=clock)
    await coordinator.stop()  # the tests call admit() and reconcile() themselves
    return coordinator, cluster, clock


def ticket(user: str, clock: FakeClock) -> Ticket:
    return Ticket(f"jhub/jupyter-{user}", OWN, user, {}, 0, clock.now() - timedelta(seconds=1), 600)


async def test_a_start_uses_its_own_pool_while_it_has_room(queue) -> None:
    coordinator, _cluster, clock = queue
    assert await coordinator.admit(ticket("ann", clock), BORROW) is OWN


async def test_a_start_whose_pool_is_full_borrows_a_free_card_and_counts_it_on_the_way(queue) -> None:
    coordinator, cluster, clock = queue
    cluster.add(holding("dev-user", "dev-0", OWN.kind, 4))
    assert await coordinator.admit(ticket("ann", clock), BORROW) is BORROW
    assert coordinator.tickets == {}, "it does not wait"
    # 3 of the training node's 4 units are left: three more borrow, the fifth queues on its own pool.
    for user in ("bob", "cy", "di"):
        assert await coordinator.admit(ticket(user, clock), BORROW) is BORROW
    eve = ticket("eve", clock)
    assert await coordinator.admit(eve, BORROW) is None
    assert coordinator.tickets[eve.key].kind == OWN.kind


async def test_a_batch_pod_on_the_borrowable_card_is_never_counted_free_the_start_waits(queue) -> None:
    coordinator, cluster, clock = queue
    cluster.add(holding("dev-user", "dev-0", OWN.kind, 4), holding("train", "train-0", "batch", 4, priority=-100))
    ann = ticket("ann", clock)
    assert await coordinator.admit(ann, BORROW) is None
    await coordinator.reconcile()
    assert ann.gated
    assert ann.position == 1
    assert not ann.lifted.is_set()


async def test_without_a_borrowing_option_a_full_pool_queues(queue) -> None:
    coordinator, cluster, clock = queue
    cluster.add(holding("dev-user", "dev-0", OWN.kind, 4))
    assert await coordinator.admit(ticket("ann", clock)) is None
