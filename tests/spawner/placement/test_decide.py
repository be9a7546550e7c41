"""The placement decision against literal cards: spread to the least busy card while nothing waits for
whole cards, pack onto the fullest card that fits while something does."""

from __future__ import annotations

import pytest
from traitlets import TraitError

from fracnb_spawner.config.traits import FractionalTraits
from fracnb_spawner.placement.decide import (
    MOST_RANKED,
    Busyness,
    CardState,
    Holder,
    check_policy,
    check_reserve,
    decide,
    scheduler_policy,
)

GIB = 2**30
NOBODY_KNOWN = Busyness({}, 0.3)


def card(node: str, device: str, free_gib: int, *holders: Holder, capacity_gib: int = 80) -> CardState:
    return CardState(f"gpu.nvidia.com/{node}/{device}", node, device, f"GPU-{node}-{device}", free_gib * GIB,
                     capacity_gib * GIB, tuple(holders))  # fmt: skip


def test_spread_takes_the_card_whose_holders_are_least_busy_by_history_not_the_emptiest() -> None:
    busy = card("dev-0", "gpu-0", 60, Holder("ann"))  # one holder, busy most of her time
    calm = card("dev-1", "gpu-3", 40, Holder("bob"), Holder("cat"))  # two holders who rarely compute
    history = Busyness({"ann": 0.9, "bob": 0.05, "cat": 0.1}, 0.3)
    placement = decide("spread", [busy, calm], 20 * GIB, history)
    assert placement is not None
    assert [c.device for c in placement.ranked] == ["gpu-3", "gpu-0"]
    assert placement.mode == "spread"
    assert placement.reason == (
        "card 3 of dev-1: 0.2 busy expected of 2 holders (from their busy time), the least busy of 2 cards "
        "that fit; nothing waits for whole cards"
    )


def test_the_live_state_wins_over_history_and_reads_as_busy_holders_of_n() -> None:
    quiet_by_history_but_busy_now = card("dev-0", "gpu-0", 60, Holder("ann", busy_now=True), Holder("dan", True))
    six = card("dev-1", "gpu-3", 20, *(Holder(f"u{i}", busy_now=i == 0) for i in range(6)))
    history = Busyness({"ann": 0.0}, 0.1)
    placement = decide("adaptive", [quiet_by_history_but_busy_now, six], 10 * GIB, history)
    assert placement is not None
    assert placement.ranked[0].device == "gpu-3"
    assert placement.reason.startswith("card 3 of dev-1: 1 busy holder of 6, the least busy of 2 cards")
    assert placement.reason.endswith("; nothing waits for whole cards")


def test_an_unknown_user_counts_as_the_average_user() -> None:
    unknown = card("dev-0", "gpu-0", 60, Holder("new"))
    known = card("dev-1", "gpu-0", 60, Holder("old"))
    assert decide("spread", [unknown, known], GIB, Busyness({"old": 0.2}, 0.5)).ranked[0].node == "dev-1"
    assert decide("spread", [unknown, known], GIB, Busyness({"old": 0.8}, 0.5)).ranked[0].node == "dev-0"


def test_equally_busy_cards_go_to_the_one_with_fewer_holders_then_more_memory_free() -> None:
    cards = [card("a", "gpu-0", 40, Holder("x")), card("b", "gpu-0", 60, Holder("y")), card("c", "gpu-0", 80)]
    placement = decide("spread", cards, GIB, Busyness({"x": 0.0, "y": 0.0}, 0.0), reserve=0)
    assert [c.node for c in placement.ranked] == ["c", "b", "a"]
    # With the default reserve of 2 the wholly free card c is kept for whole-card starts.
    assert [c.node for c in decide("spread", cards, GIB, Busyness({"x": 0.0, "y": 0.0}, 0.0)).ranked] == ["b", "a", "c"]


def test_adaptive_packs_onto_the_fullest_card_that_fits_while_a_whole_card_start_waits() -> None:
    empty = card("dev-0", "gpu-0", 80)
    fuller = card("dev-1", "gpu-1", 20, Holder("ann", busy_now=False), Holder("bob", busy_now=False))
    too_full = card("dev-1", "gpu-2", 10, Holder("cat"))
    placement = decide("adaptive", [empty, fuller, too_full], 20 * GIB, NOBODY_KNOWN, "a whole-card start")
    assert placement is not None
    assert placement.mode == "pack"
    assert [c.device for c in placement.ranked] == ["gpu-1", "gpu-0"]  # gpu-2 cannot take 20 GiB
    assert placement.reason == (
        "card 1 of dev-1: the fullest of 2 cards that fit (60 GiB of 80 GiB taken, 0 busy holders of 2); "
        "a whole-card start waits for whole cards"
    )
    # With nothing waiting, the same cards spread: the empty card first (with no reserve kept).
    assert decide("adaptive", [empty, fuller, too_full], 20 * GIB, NOBODY_KNOWN, reserve=0).ranked[0].node == "dev-0"


def test_packed_always_packs_and_spread_always_spreads() -> None:
    cards = [card("dev-0", "gpu-0", 80), card("dev-1", "gpu-0", 40, Holder("ann"))]
    assert decide("packed", cards, GIB, NOBODY_KNOWN).ranked[0].node == "dev-1"
    assert decide("spread", cards, GIB, NOBODY_KNOWN, "a whole-card start", reserve=0).ranked[0].node == "dev-0"


def test_no_choice_without_two_cards_that_fit() -> None:
    cards = [card("dev-0", "gpu-0", 10), card("dev-1", "gpu-0", 40)]
    assert decide("adaptive", cards, 20 * GIB, NOBODY_KNOWN) is None
    assert decide("adaptive", [], 20 * GIB, NOBODY_KNOWN) is None


def test_at_most_seven_cards_are_ranked_so_a_claim_keeps_one_subrequest_for_any_card() -> None:
    cards = [card("dev-0", f"gpu-{i}", 80) for i in range(10)]
    placement = decide("spread", cards, GIB, NOBODY_KNOWN)
    assert len(placement.ranked) == MOST_RANKED == 7
    assert placement.uuids[0] == "GPU-dev-0-gpu-0"


def test_hamis_per_pod_policy_follows_the_mode() -> None:
    assert (scheduler_policy("pack"), scheduler_policy("spread")) == ("binpack", "spread")


@pytest.mark.parametrize("value", ["adaptive", "packed", "spread"])
def test_the_three_policies_are_accepted(value: str) -> None:
    assert check_policy(value) == value


def test_another_policy_is_refused_naming_the_accepted_ones() -> None:
    with pytest.raises(ValueError, match="'binpack' is not a placement policy; use one of adaptive, packed, spread"):
        check_policy("binpack")


def test_spreading_keeps_the_reserve_of_wholly_free_cards_for_whole_card_starts_unless_nothing_else_fits() -> None:
    used = card("dev-0", "gpu-0", 40, Holder("ann"), Holder("bob"))  # busy users, but not a kept card
    free = [card("dev-1", f"gpu-{i}", 80) for i in range(3)]
    history = Busyness({"ann": 0.9, "bob": 0.9}, 0.3)
    placement = decide("spread", [used, *free], 10 * GIB, history, reserve=2)
    # one empty card is outside the reserve: it comes first; then the used card; the two kept cards last
    assert [(c.node, c.device) for c in placement.ranked] == [
        ("dev-1", "gpu-0"), ("dev-0", "gpu-0"), ("dev-1", "gpu-1"), ("dev-1", "gpu-2"),
    ]  # fmt: skip
    assert placement.reason.endswith("nothing waits for whole cards (2 wholly free cards kept for whole-card starts)")
    only_kept = decide("spread", [used, *free[1:]], 50 * GIB, history, reserve=2)  # 50 GiB: only empty cards fit
    assert [c.device for c in only_kept.ranked] == ["gpu-1", "gpu-2"]
    assert only_kept.reason.endswith("(a card kept for whole-card starts: no other fits)")
    assert decide("spread", [used, *free], 10 * GIB, history, reserve=0).ranked[0].device == "gpu-0"
    assert decide("spread", [used, *free], 10 * GIB, history, reserve=0).ranked[1].node == "dev-1"


def test_packing_passes_over_a_card_expected_to_keep_one_holder_busy_while_a_quieter_card_fits() -> None:
    long_cell = card("dev-0", "gpu-0", 10, Holder("ann", busy_now=True))  # the fullest, but busy
    quiet = card("dev-0", "gpu-1", 40, Holder("bob"), Holder("cat"))  # 0.2 + 0.3 expected busy
    empty = card("dev-1", "gpu-0", 80)
    history = Busyness({"bob": 0.2, "cat": 0.3}, 0.3)
    placement = decide("packed", [long_cell, quiet, empty], 10 * GIB, history)
    assert [(c.node, c.device) for c in placement.ranked] == [
        ("dev-0", "gpu-1"),
        ("dev-1", "gpu-0"),
        ("dev-0", "gpu-0"),
    ]
    assert placement.reason.startswith("card 1 of dev-0: the fullest of 3 cards that fit")
    # Expected busy summed from history counts too: two users at 0.5 each keep the card busy.
    halves = Busyness({"bob": 0.5, "cat": 0.5}, 0.3)
    assert decide("packed", [quiet, empty], 10 * GIB, halves).ranked[0].node == "dev-1"
    tenths = card("dev-0", "gpu-2", 10, *(Holder(f"t{i}") for i in range(10)))  # ten users busy 0.1: 1.0
    tenth = Busyness({f"t{i}": 0.1 for i in range(10)}, 0.3)
    assert decide("packed", [tenths, empty], 10 * GIB, tenth).ranked[0].node == "dev-1"
    # With only busy cards that fit, the fullest of them still comes first.
    busier = card("dev-1", "gpu-1", 60, Holder("dan", busy_now=True), Holder("eve", busy_now=True))
    assert decide("packed", [busier, long_cell], 10 * GIB, history).ranked[0].device == "gpu-0"


def test_a_negative_reserve_is_refused_naming_the_key() -> None:
    assert check_reserve(0) == 0
    assert FractionalTraits().placement_reserve_cards == 2
    with pytest.raises(TraitError, match=r"FractionalSpawner\.placement_reserve_cards: -1 is not a number of cards"):
        FractionalTraits(placement_reserve_cards=-1)
