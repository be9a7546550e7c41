"""The reclaim rule for a notebook that may borrow a training card (docs/lending.md §4), against literal cards:
its own pool first, the borrowable pool's batch pods only under the same rule (fewest and youngest below the
notebooks' priority, budgets, the per-minute limit, the policy's namespaces), nothing while a card is free."""

from __future__ import annotations

import json
from dataclasses import replace

from fracnb_spawner.cluster.devices import DraWant
from fracnb_spawner.common.podkeys import BORROWABLE_ANNOTATION
from fracnb_spawner.reclaim.cluster import wants_of
from fracnb_spawner.reclaim.victims import Budget, Need, Policy, choose_among, plan_reclaims
from tests.spawner.reclaim.test_victims import ANY, GIB, batch, card, notebook

DEV, TRAIN = frozenset({"dev/gpu-0"}), frozenset({"train/gpu-0", "train/gpu-1"})
OWN, BORROWING = Need(20 * GIB, usable=DEV), Need(20 * GIB, usable=TRAIN)


def cluster(*training_holders, dev_holders=None) -> list:
    dev = dev_holders if dev_holders is not None else (notebook("dev-user", 80),)
    return [
        card("dev/gpu-0", *dev, group="dev"),
        card("train/gpu-0", *training_holders, group="train", shared=False),
    ]


def test_a_full_development_pool_takes_the_youngest_batch_pod_of_the_training_card() -> None:
    cards = [
        card("dev/gpu-0", notebook("dev-user", 80), group="dev"),
        card("train/gpu-0", batch("old", 80, 300), group="train", shared=False),
        card("train/gpu-1", batch("young", 80, 5), group="train", shared=False),
    ]
    need, choice = choose_among([OWN, BORROWING], cards, ANY)
    assert need is BORROWING
    assert choice.victims == (("batch", "young"),)
    assert choice.cards == ("train/gpu-1",)


def test_without_the_borrowing_option_nothing_is_evicted_for_it() -> None:
    assert choose_among([OWN], cluster(batch("train", 80, 5)), ANY) is None


def test_its_own_pool_is_preferred_when_both_would_do() -> None:
    # Two pods leave on the development card, one would on the training card: its own pool still comes first.
    dev = (notebook("dev-user", 40), batch("dev-a", 20, 1), batch("dev-b", 20, 2))
    cards = cluster(batch("train", 80, 5), dev_holders=dev)
    own, borrowing = Need(30 * GIB, usable=DEV), Need(30 * GIB, usable=TRAIN)
    need, choice = choose_among([own, borrowing], cards, ANY)
    assert need is own
    assert choice.victims == (("batch", "dev-a"), ("batch", "dev-b"))


def test_a_free_training_card_evicts_no_one_on_either_pool() -> None:
    cards = cluster(dev_holders=(batch("dev-job", 80, 5),))  # the training card is free, the dev card lent
    need, choice = choose_among([OWN, BORROWING], cards, ANY)
    assert (need, choice.victims) == (BORROWING, ())
    assert plan_reclaims([(("jhub", "jupyter-ann"), (OWN, BORROWING))], cards, ANY, left=10) == []


def test_the_training_card_is_spared_by_priority_namespace_and_budget() -> None:
    above = cluster(batch("train", 80, 5, priority=10))
    elsewhere = cluster(batch("train", 80, 5, namespace="research"))
    waiter = [(("jhub", "jupyter-ann"), (OWN, BORROWING))]
    assert plan_reclaims(waiter, above, ANY, left=10) == []
    assert plan_reclaims(waiter, elsewhere, Policy(0, frozenset({"batch"})), left=10) == []
    held = [Budget(frozenset({("batch", "train")}), 0)]
    assert plan_reclaims(waiter, cluster(batch("train", 80, 5)), ANY, held, left=10) == []
    assert plan_reclaims(waiter, cluster(batch("train", 80, 5)), ANY, left=10) == [
        (("batch", "train"), ("jhub", "jupyter-ann"))
    ]


def test_the_per_minute_limit_holds_and_a_later_waiter_sees_the_earlier_borrow() -> None:
    cards = [
        card("dev/gpu-0", notebook("dev-user", 80), group="dev"),
        card("train/gpu-0", batch("a", 80, 5), group="train", shared=False),
        card("train/gpu-1", batch("b", 80, 9), group="train", shared=False),
    ]
    ann, bob = ("jhub", "jupyter-ann"), ("jhub", "jupyter-bob")
    waiters = [(ann, (OWN, BORROWING)), (bob, (OWN, BORROWING))]
    assert plan_reclaims(waiters, cards, ANY, left=1) == [(("batch", "a"), ann)]
    assert plan_reclaims(waiters, cards, ANY, left=10) == [(("batch", "a"), ann), (("batch", "b"), bob)]


def test_a_queued_pod_that_may_borrow_wants_the_same_devices_on_the_borrowable_nodes_second() -> None:
    want = DraWant("gpu.nvidia.com", "gpu", memory=20 * GIB, node_selector=(("pool", "dev"),))
    may_borrow = {"metadata": {"annotations": {BORROWABLE_ANNOTATION: json.dumps({"pool": "training"})}}}
    assert wants_of(want, may_borrow) == [want, replace(want, node_selector=(("pool", "training"),))]
    assert wants_of(want, {"metadata": {}}) == [want]
