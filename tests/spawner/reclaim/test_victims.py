"""The reclaim rule against literal cards: who is evicted for which waiting notebook, and who never is."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from fracnb_spawner.reclaim.victims import (
    Budget,
    Card,
    Choice,
    Holder,
    Need,
    Policy,
    choose_victims,
    evictions_left,
    plan_reclaims,
)

GIB = 2**30
T0 = datetime(2026, 11, 28, 9, 0, tzinfo=timezone.utc)
BATCH = -100
ANY = Policy(priority_below=0)


def batch(name: str, gib: int, minutes_old: int, *, namespace: str = "batch", priority: int = BATCH) -> Holder:
    return Holder((namespace, name), gib * GIB, priority, T0 - timedelta(minutes=minutes_old))


def notebook(name: str, gib: int) -> Holder:
    return Holder(("jhub", name), gib * GIB, 0, T0 - timedelta(hours=5), notebook=True)


def card(key: str, *holders: Holder, group: str = "node-a", gib: int = 80, shared: bool = True) -> Card:
    return Card(key, group, gib * GIB, shared, holders)


def share(gib: int) -> Need:
    return Need(gib * GIB)


def test_a_notebook_that_fits_evicts_no_one() -> None:
    cards = [card("gpu-0", batch("job-a", 40, 10))]
    assert choose_victims(share(20), cards, ANY) == Choice((), ("gpu-0",))


def test_pods_already_leaving_count_as_freed() -> None:
    leaving = Holder(("batch", "job-a"), 80 * GIB, BATCH, T0, leaving=True)
    assert choose_victims(share(20), [card("gpu-0", leaving)], ANY) == Choice((), ("gpu-0",))


def test_the_fewest_victims_then_the_youngest() -> None:
    cards = [card("gpu-0", batch("old-big", 40, 300), batch("young-small-1", 20, 1), batch("young-small-2", 20, 2))]
    # 40 GiB are missing: one pod (the old 40 GiB one) beats two young ones
    assert choose_victims(share(40), cards, ANY).victims == (("batch", "old-big"),)
    cards = [card("gpu-0", batch("old", 40, 300), batch("young", 40, 5))]
    assert choose_victims(share(40), cards, ANY).victims == (("batch", "young"),)


def test_the_card_with_the_cheapest_choice_wins() -> None:
    cards = [
        card("gpu-0", batch("a1", 40, 1), batch("a2", 40, 2)),
        card("gpu-1", batch("b1", 80, 3), group="node-b"),
    ]
    choice = choose_victims(share(60), cards, ANY)
    assert choice == Choice((("batch", "b1"),), ("gpu-1",))


def test_a_notebook_is_never_evicted_nor_a_pod_at_or_above_the_notebooks_priority() -> None:
    cards = [
        card("gpu-0", notebook("jupyter-ann", 60), batch("job", 20, 1)),
        card("gpu-1", batch("equal", 80, 1, priority=0)),
    ]
    assert choose_victims(share(40), cards, ANY) is None
    # the policy's bound is stricter than the notebook's priority
    cards = [card("gpu-0", batch("low", 80, 1, priority=-5))]
    assert choose_victims(share(40), cards, Policy(priority_below=-10)) is None
    assert choose_victims(share(40), cards, Policy(priority_below=-1)).victims == (("batch", "low"),)


def test_only_the_policys_namespaces() -> None:
    cards = [card("gpu-0", batch("theirs", 80, 1, namespace="research")), card("gpu-1", batch("ours", 80, 30))]
    policy = Policy(priority_below=0, namespaces=frozenset({"batch"}))
    assert choose_victims(share(40), cards, policy).victims == (("batch", "ours"),)


def test_a_disruption_budget_is_respected() -> None:
    cards = [card("gpu-0", batch("guarded", 80, 1)), card("gpu-1", batch("free", 80, 60))]
    guarded = Budget(frozenset({("batch", "guarded")}), allowed=0)
    assert choose_victims(share(40), cards, ANY, [guarded]).victims == (("batch", "free"),)
    both = Budget(frozenset({("batch", "a"), ("batch", "b")}), allowed=1)
    cards = [card("gpu-0", batch("a", 40, 1), batch("b", 40, 2))]
    assert choose_victims(share(80), cards, ANY, [both]) is None


def test_shares_go_to_a_card_already_shared_so_whole_cards_stay_whole() -> None:
    cards = [card("whole", batch("train", 80, 1), group="node-b"), card("shared", batch("small", 80, 1))]
    cards[1] = card("shared", batch("small", 20, 1), batch("other", 60, 1))
    assert choose_victims(share(20), cards, ANY).cards == ("shared",)
    # fitting without evictions: the tightest card, not the empty one
    cards = [card("empty", group="node-b"), card("half", notebook("jupyter-bo", 40))]
    assert choose_victims(share(20), cards, ANY).cards == ("half",)


def test_whole_cards_come_from_one_node() -> None:
    cards = [
        card("a0", batch("a0", 80, 1), shared=False),
        card("b0", group="node-b", shared=False),
        card("b1", batch("b1", 80, 3), group="node-b", shared=False),
        card("a1", notebook("jupyter-cy", 80), shared=False),
    ]
    choice = choose_victims(Need(None, cards=2), cards, ANY)
    assert choice == Choice((("batch", "b1"),), ("b0", "b1"))
    assert choose_victims(Need(None, cards=3), cards, ANY) is None


def test_the_limit_per_minute() -> None:
    assert evictions_left([100.0, 130.0, 159.0], now=159.5, per_minute=5) == 2
    assert evictions_left([100.0, 130.0, 159.0], now=190.5, per_minute=5) == 4
    assert evictions_left([1.0, 2.0], now=3.0, per_minute=1) == 0


def test_plan_spends_the_limit_in_queue_order_and_counts_earlier_choices() -> None:
    cards = [card("gpu-0", batch("j1", 40, 1), batch("j2", 40, 2)), card("gpu-1", batch("j3", 80, 3), group="node-b")]
    first, second = ("jhub", "jupyter-ann"), ("jhub", "jupyter-bo")
    plan = plan_reclaims([(first, share(40)), (second, share(40))], cards, ANY, left=5)
    assert plan == [(("batch", "j1"), first), (("batch", "j2"), second)]
    # one eviction left: the first notebook's youngest victim only
    plan = plan_reclaims([(first, share(80)), (second, share(40))], cards, ANY, left=1)
    assert plan == [(("batch", "j3"), first)]
    assert plan_reclaims([(first, share(40))], cards, ANY, left=0) == []


def test_plan_respects_budgets_across_waiters() -> None:
    cards = [card("gpu-0", batch("a", 80, 1)), card("gpu-1", batch("b", 80, 1), group="node-b")]
    budget = Budget(frozenset({("batch", "a"), ("batch", "b")}), allowed=1)
    waiters = [(("jhub", "n1"), share(40)), (("jhub", "n2"), share(60))]
    assert len(plan_reclaims(waiters, cards, ANY, [budget], left=10)) == 1


def test_only_the_cards_a_notebook_may_use() -> None:
    cards = [card("h100", batch("young", 80, 1)), card("a100", batch("old", 80, 90), group="node-b")]
    need = Need(40 * GIB, usable=frozenset({"a100"}))
    assert choose_victims(need, cards, ANY) == Choice((("batch", "old"),), ("a100",))


def test_a_development_card_with_room_spares_the_training_server() -> None:
    training = [card(f"train-{i}", batch(f"job-{i}", 80, 5 + i), group="trainer") for i in range(4)]
    development = card("dev-0", notebook("jupyter-hal", 60), group="dev")
    assert choose_victims(share(20), [*training, development], ANY) == Choice((), ("dev-0",))
    assert choose_victims(share(40), [*training, development], ANY).victims == (("batch", "job-0"),)


def test_a_pod_holding_two_cards_is_one_victim_and_evicted_once() -> None:
    def held_by(key: str, holder: Holder) -> Card:
        return card(key, holder, shared=False)

    two_card_job = batch("two-card-job", 80, 30)
    cards = [held_by("c1", two_card_job), held_by("c2", two_card_job), held_by("c3", batch("young", 80, 1))]
    # One pod frees two cards; the younger single-card pod plus half of the older job would be two pods.
    assert choose_victims(Need(None, cards=2), cards, ANY) == Choice((("batch", "two-card-job"),), ("c1", "c2"))
    plan = plan_reclaims([(("jhub", "jupyter-ann"), Need(None, cards=2))], cards, ANY, left=10)
    assert plan == [(("batch", "two-card-job"), ("jhub", "jupyter-ann"))]


def test_a_slice_may_take_an_unshared_card_whole_after_the_shared_ones() -> None:
    shared_full = card("shared", notebook("jupyter-ann", 60), notebook("jupyter-bo", 20))
    unshared = card("whole", batch("train", 80, 10), group="node-b", shared=False)
    assert choose_victims(share(20), [shared_full, unshared], ANY) == Choice((("batch", "train"),), ("whole",))
    # a shared card with a victim to spare ties on victims and age: the shared card goes first
    shared_batch = card("shared-b", batch("small", 80, 10), group="node-c")
    assert choose_victims(share(20), [unshared, shared_batch], ANY).cards == ("shared-b",)
    # an unshared card a notebook holds is never freed for a slice
    held = card("held", notebook("jupyter-cy", 10), shared=False)
    assert choose_victims(share(20), [shared_full, held], ANY) is None
