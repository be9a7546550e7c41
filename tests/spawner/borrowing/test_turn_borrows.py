"""A queued spawn with a borrowing option, when its turn comes (fracnb_spawner.borrowing.queued and the
coordinator's reconcile), against the fake cluster of tests/spawner/queue: created gated to start on either pool,
it is lifted onto its own pool when that has room, else onto a borrowable card freed meanwhile (by the reclaim
pass's eviction of a batch pod), with the chosen pool's node selector added in the same patch."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from fracnb_spawner.borrowing.decide import Borrow
from fracnb_spawner.borrowing.queued import borrowable_selector, lift_operations, open_selector
from fracnb_spawner.common.podkeys import BORROWABLE_ANNOTATION
from fracnb_spawner.queue.coordinator import QueueCoordinator, Ticket
from tests.spawner.borrowing.test_coordinator_borrows import BORROW, DEV, OWN, TRAINING, holding, node
from tests.spawner.queue.fakes import FakeApi, FakeClock, FakeCluster, gated

OPTION = Borrow(BORROW, OWN.kind, TRAINING)


def test_the_queued_pod_keeps_only_what_both_pools_agree_on() -> None:
    assert open_selector(DEV, TRAINING) == {k: v for k, v in DEV.items() if k != "fracnb.io/pool"}
    assert open_selector({"kubernetes.io/hostname": "a"}, {"kubernetes.io/hostname": "b"}) == {}


def test_lifting_adds_the_chosen_pools_selector_and_marks_a_borrower() -> None:
    gate = lift_operations(DEV, None, False)
    assert [op["op"] for op in gate] == ["test", "remove"], "no borrowing option: only the gate"
    own = lift_operations(DEV, OPTION, False)
    assert own[2:] == [{"op": "add", "path": "/spec/nodeSelector", "value": DEV}]
    borrowed = lift_operations(DEV, OPTION, True)
    assert borrowed[2:] == [
        {"op": "add", "path": "/spec/nodeSelector", "value": TRAINING},
        {"op": "add", "path": "/metadata/labels/fracnb.io~1slot-kind", "value": BORROW.kind},
        {"op": "add", "path": "/metadata/labels/fracnb.io~1borrowed", "value": "true"},
        {"op": "add", "path": "/metadata/annotations/fracnb.io~1borrowed-from", "value": OWN.kind},
    ]


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (json.dumps({"pool": "training"}), {"pool": "training"}),
        (None, None),
        ("not json", None),
        ("{}", None),
        (json.dumps({"pool": 3}), None),
    ],
)
def test_the_borrowable_annotation_is_read_or_ignored(annotation, expected) -> None:
    annotations = {} if annotation is None else {BORROWABLE_ANNOTATION: annotation}
    assert borrowable_selector({"metadata": {"annotations": annotations}}) == expected


@pytest.fixture
async def queue() -> tuple[QueueCoordinator, FakeCluster, FakeClock, FakeApi]:
    cluster = FakeCluster(node("dev-0", DEV, 4), node("train-0", TRAINING, 4))
    clock = FakeClock()
    api = FakeApi(cluster)
    coordinator = QueueCoordinator(cluster, api, clock=clock)
    await coordinator.stop()  # the tests call admit() and reconcile() themselves
    return coordinator, cluster, clock, api


async def waiting_ann(coordinator: QueueCoordinator, cluster: FakeCluster, clock: FakeClock) -> Ticket:
    """ann queued with a borrowing option while both pools are full, her gated pod created."""
    ann = Ticket("jhub/jupyter-ann", OWN, "ann", {}, 0, clock.now() - timedelta(seconds=1), 600)
    assert await coordinator.admit(ann, BORROW) is None
    ann.borrow, ann.own_selector = OPTION, DEV
    pod = gated("ann", ann.queued_at)
    pod["metadata"]["labels"]["fracnb.io/slot-kind"] = OWN.kind
    cluster.add(pod)
    await coordinator.reconcile()
    assert not ann.lifted.is_set()
    return ann


async def test_a_borrowable_card_freed_while_it_waits_starts_it_there(queue) -> None:
    coordinator, cluster, clock, api = queue
    cluster.add(holding("dev-user", "dev-0", OWN.kind, 4), holding("train", "train-0", "batch", 4, priority=-100))
    ann = await waiting_ann(coordinator, cluster, clock)
    cluster.remove("jhub/jupyter-train")  # the reclaim pass evicted it
    await coordinator.reconcile()
    assert ann.lifted.is_set()
    assert ann.went is BORROW
    _namespace, name, body = api.patches[-1]
    assert name == "jupyter-ann"
    assert {"op": "add", "path": "/spec/nodeSelector", "value": TRAINING} in body
    assert {"op": "add", "path": "/metadata/labels/fracnb.io~1borrowed", "value": "true"} in body


async def test_its_own_pool_comes_first_when_both_have_room(queue) -> None:
    coordinator, cluster, clock, api = queue
    cluster.add(holding("dev-user", "dev-0", OWN.kind, 4), holding("train", "train-0", "batch", 4, priority=-100))
    ann = await waiting_ann(coordinator, cluster, clock)
    cluster.remove("jhub/jupyter-train")
    cluster.remove("jhub/jupyter-dev-user")
    await coordinator.reconcile()
    assert ann.went is OWN
    assert {"op": "add", "path": "/spec/nodeSelector", "value": DEV} in api.patches[-1][2]


async def test_with_both_pools_still_full_it_keeps_waiting(queue) -> None:
    coordinator, cluster, clock, api = queue
    cluster.add(holding("dev-user", "dev-0", OWN.kind, 4), holding("train", "train-0", "batch", 4, priority=-100))
    ann = await waiting_ann(coordinator, cluster, clock)
    await coordinator.reconcile()
    assert not ann.lifted.is_set()
    assert api.lifted() == []
