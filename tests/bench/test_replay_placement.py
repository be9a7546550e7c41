"""The replay's placement goes through the product's rule (``fracnb_spawner.placement.decide``): the replay's
cards, holders and history in, the hub's ranking out; and the claim that asks for it."""

from __future__ import annotations

from fractions import Fraction

import pytest

from bench.replay_placement import (
    JOB,
    CardLoad,
    History,
    busyness,
    choose_cards,
    holder,
    preferred_claim,
    what_waits,
)
from fracnb_spawner.placement.decide import NO_HISTORY_AVERAGE

EIGHTH = Fraction(1, 8)
HISTORY = busyness({
    "bob": History(3600, 720),  # busy a fifth of his time
    "cat": History(3600, 360),
    "dan": History(3600, 360),
    "eve": History(3600, 360),
})  # fmt: skip
LONG_CELL_NOW = holder("ann", busy_for=600)  # busy for 10 minutes: a long cell runs on
CARDS = (
    CardLoad("dev-0/gpu-0", Fraction(3, 8), (LONG_CELL_NOW, holder("bob", None))),  # 1.2 expected busy
    CardLoad("dev-0/gpu-1", Fraction(5, 8), tuple(holder(u, None) for u in ("cat", "dan", "eve"))),  # 0.3
    CardLoad("dev-0/gpu-2", Fraction(1), (JOB,)),  # full
    CardLoad("dev-1/gpu-0", Fraction(0)),
    CardLoad("dev-1/gpu-1", Fraction(0)),
    CardLoad("dev-1/gpu-2", Fraction(0)),
)


def test_spreading_goes_to_the_least_busy_card_and_keeps_whole_cards_free_for_whole_starts() -> None:
    ranked = choose_cards(EIGHTH, CARDS, HISTORY, reserve=2)
    assert ranked[0] == "dev-1/gpu-0"  # the one empty card not kept in reserve: nobody busy there
    assert ranked[1:3] == ["dev-0/gpu-1", "dev-0/gpu-0"]  # then the quieter card, though it holds more
    assert ranked[3:] == ["dev-1/gpu-1", "dev-1/gpu-2"]  # the reserve only when nothing else fits
    assert "dev-0/gpu-2" not in ranked  # no room
    # Without a reserve the quiet card beats the busy one whatever their shares.
    assert choose_cards(EIGHTH, CARDS[:2], HISTORY, reserve=0) == ["dev-0/gpu-1", "dev-0/gpu-0"]
    assert choose_cards(EIGHTH, CARDS, HISTORY) == ranked  # the product's default reserve is 2


def test_packing_goes_to_the_fullest_card_that_fits_passing_over_cards_expected_busy() -> None:
    waiting = what_waits(whole_card_waits=True, job_waits_for_pool=False)
    packed = choose_cards(EIGHTH, CARDS, HISTORY, whole_waiting=waiting)
    assert packed[:2] == ["dev-0/gpu-1", "dev-1/gpu-0"]
    assert packed[-1] == "dev-0/gpu-0"  # a holder in a long cell: a card's worth expected busy, last
    quiet = [CardLoad("dev-0/gpu-0", Fraction(3, 8)), CardLoad("dev-0/gpu-1", Fraction(5, 8), (holder("cat", None),))]
    assert choose_cards(EIGHTH, quiet, HISTORY, policy="packed") == ["dev-0/gpu-1", "dev-0/gpu-0"]  # the fullest
    # 3/8 + 1/2 fits; 5/8 + 1/2 does not: with one card that fits the hub names none, the replay takes it
    assert choose_cards(Fraction(1, 2), quiet, HISTORY, policy="packed") == ["dev-0/gpu-0"]
    assert choose_cards(Fraction(3, 4), CARDS[:3], HISTORY, policy="packed") == []  # none fits: the start waits
    assert choose_cards(Fraction(1), CARDS, HISTORY, policy="packed") == ["dev-1/gpu-0", "dev-1/gpu-1", "dev-1/gpu-2"]


def test_it_packs_only_while_a_whole_card_start_or_a_lent_job_that_could_take_a_card_waits() -> None:
    assert what_waits(whole_card_waits=False, job_waits_for_pool=False) is None
    assert what_waits(whole_card_waits=True, job_waits_for_pool=False) == "a whole-card start"
    assert what_waits(whole_card_waits=False, job_waits_for_pool=True) == "a lent job"
    assert choose_cards(EIGHTH, CARDS, HISTORY, whole_waiting="a lent job")[0] == "dev-0/gpu-1"


def test_a_holder_is_expected_as_busy_as_its_user_has_been_an_unknown_user_as_the_average() -> None:
    history = busyness({"a": History(3600, 360), "b": History(3600, 1080), "c": History()})
    assert history.average == pytest.approx(0.2)
    assert history.shares == pytest.approx({"a": 0.1, "b": 0.3})  # c has no server time yet: unknown
    assert busyness({"c": History()}).average == NO_HISTORY_AVERAGE == 0.5  # nobody known yet: the product's
    assert history.expected(holder("a", None)) == pytest.approx(0.1)
    assert history.expected(holder("new", None)) == pytest.approx(0.2)
    assert history.expected(holder("a", 600)) == 1.0  # busy for 10 minutes: a long cell runs on
    assert history.expected(holder("a", 60)) == pytest.approx(0.1)  # a short burst: its history
    assert history.expected(JOB) == 1.0  # a training job is always busy


def test_the_claim_ranks_the_chosen_cards_by_uuid_then_takes_any() -> None:
    claim = {
        "kind": "ResourceClaim",
        "metadata": {"name": "jupyter-ann-gpu"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {"deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"memory": "4Gi"}}},
                    }
                ]
            }
        },
    }
    made = preferred_claim(claim, ["GPU-a", "GPU-b"], "gpu.nvidia.com")
    options = made["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert [o["name"] for o in options] == ["card-0", "card-1", "any"]
    assert options[0]["selectors"] == [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].uuid == 'GPU-a'"}}]
    assert all(o["capacity"] == {"requests": {"memory": "4Gi"}} for o in options)
    assert "selectors" not in options[2]
    assert "exactly" in claim["spec"]["devices"]["requests"][0]  # the spawner's own claim is left as it was
    many = preferred_claim(claim, [f"GPU-{n}" for n in range(12)], "gpu.nvidia.com")
    assert len(many["spec"]["devices"]["requests"][0]["firstAvailable"]) == 8  # DRA's limit: 7 cards and any
