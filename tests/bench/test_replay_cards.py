"""The device plugin's card choice, as the replay models it, against the cases of the plugin's own tests.

The cases are facts taken from NVIDIA/k8s-device-plugin v0.20.0, ``internal/rm/allocate_test.go``
(``TestDistributedAlloc_PartiallyAllocated_DistributesAcrossDistinctGPUs``, ``TestDistributedAlloc``,
``TestPackedAlloc``, ``TestDistributedAllocIsDefault``, ``TestPackedVsDistributedContrast``,
``TestComparatorForPolicy``, ``TestFullGPUNodeIgnoresAllocationPolicy``): GPUs and replicas in,
how many replicas each GPU gives out. The upstream tests assert counts per GPU, not which GPU,
where GPUs tie; so do these.
"""

from __future__ import annotations

from collections import Counter

import pytest

from bench.replay_cards import AllocationError, CardModel, choose_replicas


def counts(cards: list[int]) -> list[int]:
    """Replicas given out per card, largest first (upstream's assertions are about the counts)."""
    return sorted(Counter(cards).values(), reverse=True)


# ((cards, replicas per card, allocated per card), size, policy, expected replicas per card, largest first)
UPSTREAM_CASES = [
    # distributed: 2 GPUs x 2, the second with one replica taken; 2 asked: one from each
    ((2, 2, [0, 1]), 2, "distributed", [1, 1]),
    ((2, 4, [0, 0]), 2, "distributed", [1, 1]),
    ((3, 2, [0, 0, 0]), 3, "distributed", [1, 1, 1]),
    ((2, 4, [0, 0]), 4, "distributed", [2, 2]),
    ((1, 4, [0]), 1, "distributed", [1]),
    ((3, 4, [0, 0, 0]), 3, "distributed", [1, 1, 1]),  # the default policy, every time
    # packed
    ((2, 4, [0, 0]), 2, "packed", [2]),
    ((3, 2, [0, 0, 0]), 3, "packed", [2, 1]),
    ((2, 4, [0, 0]), 4, "packed", [4]),
    ((2, 4, [0, 0]), 5, "packed", [4, 1]),
    ((1, 4, [0]), 1, "packed", [1]),
]


@pytest.mark.parametrize(("node", "size", "policy", "expected"), UPSTREAM_CASES)
def test_the_plugins_own_cases(node, size, policy, expected) -> None:
    cards, replicas, allocated = node
    chosen = choose_replicas([replicas] * cards, allocated, size, policy)
    assert len(chosen) == size
    assert counts(chosen) == expected


def test_distributed_takes_the_partly_free_card_too() -> None:
    # TestDistributedAlloc_PartiallyAllocated...: GPU-1 has one replica left; both GPUs give one.
    assert sorted(choose_replicas([2, 2], [0, 1], 2, "distributed")) == [0, 1]


@pytest.mark.parametrize("policy", ["distributed", "packed"])
def test_asking_for_more_replicas_than_are_available_fails(policy) -> None:
    with pytest.raises(AllocationError):
        choose_replicas([2], [0], 5, policy)


def test_the_policies_rank_cards_by_replicas_allocated() -> None:
    # TestComparatorForPolicy: a card with 3 of 4 allocated against one with 1 of 4.
    assert choose_replicas([4, 4], [3, 1], 1, "distributed") == [1]
    assert choose_replicas([4, 4], [3, 1], 1, "packed") == [0]
    with pytest.raises(ValueError, match="unknown allocation policy"):
        choose_replicas([4], [0], 1, "spread")


def test_packed_and_distributed_differ_on_the_same_input() -> None:
    # TestPackedVsDistributedContrast: 2 GPUs x 4, 4 asked.
    assert counts(choose_replicas([4, 4], [0, 0], 4, "distributed")) == [2, 2]
    assert counts(choose_replicas([4, 4], [0, 0], 4, "packed")) == [4]


def test_one_replica_at_a_time_as_the_kubelet_asks_for_notebooks() -> None:
    """Single-replica requests in a row: distributed spreads over the cards, packed fills one card first."""
    spread = CardModel({"dev-0": (2, 8, "distributed")})
    assert [spread.place(f"nb{i}", "dev-0").card for i in range(3)] == ["dev-0/0", "dev-0/1", "dev-0/0"]
    packed = CardModel({"dev-0": (2, 2, "packed")})
    assert [packed.place(f"nb{i}", "dev-0").card for i in range(4)] == ["dev-0/0", "dev-0/0", "dev-0/1", "dev-0/1"]
    packed.release("nb0")
    assert packed.place("nb4", "dev-0").card == "dev-0/0"  # the only card with a replica free
    packed.release("nb2")
    packed.release("nb4")
    # Card 0 holds nb1, card 1 holds nb3: a tie, so the lower index; then card 1, the only one with room.
    assert [packed.place(f"nb{i}", "dev-0").card for i in (5, 6)] == ["dev-0/0", "dev-0/1"]


def test_whole_gpus_ignore_the_policy_and_take_the_lowest_free_card() -> None:
    # TestFullGPUNodeIgnoresAllocationPolicy: full GPUs take the aligned allocator, whatever the policy.
    model = CardModel({"train-0": (2, 1, "packed")})
    assert model.place("job", "train-0").share == 1
    assert model.place("job2", "train-0").card == "train-0/1"
    assert model.place("job", "train-0").card == "train-0/0"  # the same pod keeps its card
    with pytest.raises(AllocationError, match="no free GPU"):
        model.place("job3", "train-0")
    model.release("job")
    assert model.place("job4", "train-0").card == "train-0/0"
    assert model.all_cards() == ["train-0/0", "train-0/1"]
