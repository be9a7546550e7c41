"""Adaptive placement on a DRA cluster: the product's rule applied to the replay's cards, and how a claim
says so. Pure.

The rule is the hub's own (``fracnb_spawner.placement.decide``, docs/spawner.md "Placement"): spread
to the card whose holders are expected least busy, keeping ``placement_reserve_cards`` (2) cards wholly
free for whole-card starts unless no other card fits; pack onto the fullest card that fits while
something waits for whole cards, passing over cards expected to keep one holder busy while a quieter
card fits. This module only turns the replay's records into the hub's view of them:

- a card is ``node/device`` with the shares of a card held on it (exact fractions, as memory units);
- a holder is its user (the desk's name) with the meter's live state: a kernel busy for ``LONG_CELL``
  seconds is in a long cell and counts as busy now (the product's hub reads the same from the pod's
  ``fracnb.io/busy-since``); otherwise the user's history of busy time says how busy it is expected to be;
  a training job is busy;
- the history is the replay's day so far: each user's server seconds and busy seconds.

The claim names its preference as DRA's ``firstAvailable`` list (GA in Kubernetes 1.36): ranked
subrequests, each selecting one card by its ``uuid`` attribute, then any card; the pod is pinned to
the chosen card's node (a ranked list is only a preference across nodes).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from fracnb_spawner.placement.decide import (
    BUSY_NOW_SECONDS,
    DEFAULT_RESERVE_CARDS,
    MOST_RANKED,
    NO_HISTORY_AVERAGE,
    Busyness,
    CardState,
    Holder,
    decide,
)

LONG_CELL = BUSY_NOW_SECONDS  # seconds busy after which the live state says "busy" (a long cell runs on): 300
JOB = Holder("", busy_now=True)  # a training job on a card: always busy


@dataclass(frozen=True)
class History:
    """What the hub knows of one user's busy time: server seconds, and the busy seconds among them."""

    server_seconds: float = 0.0
    busy_seconds: float = 0.0

    @property
    def known(self) -> bool:
        return self.server_seconds > 0

    @property
    def busy_share(self) -> float:
        return self.busy_seconds / self.server_seconds if self.server_seconds else 0.0


def busyness(histories: Mapping[str, History]) -> Busyness:
    """The hub's view of the users' busy time: each known user's share, an unknown user the mean of the known
    (the product's ``NO_HISTORY_AVERAGE`` before anyone is known)."""
    shares = {user: h.busy_share for user, h in histories.items() if h.known}
    average = sum(shares.values()) / len(shares) if shares else NO_HISTORY_AVERAGE
    return Busyness(shares, average)


def holder(user: str, busy_for: float | None) -> Holder:
    """A notebook holding a share: busy now in a long cell (``busy_for`` seconds busy), else as its history says."""
    return Holder(user, busy_now=True if busy_for is not None and busy_for >= LONG_CELL else None)


@dataclass(frozen=True)
class CardLoad:
    """One card as the replay sees it: the shares held on it and who holds them."""

    card: str  # "node/device"
    held: Fraction
    holders: tuple[Holder, ...] = ()


def card_states(cards: Iterable[CardLoad], share: Fraction) -> tuple[list[CardState], int]:
    """The cards as the hub's ``CardState`` in exact units of a card (the common denominator), and ``share``'s."""
    cards = list(cards)
    unit = math.lcm(share.denominator, *(c.held.denominator for c in cards))
    states = []
    for c in cards:
        node, _, device = c.card.partition("/")
        free = int((1 - c.held) * unit)
        states.append(CardState(c.card, node, device, "", free, unit, c.holders))
    return states, int(share * unit)


def choose_cards(
    share: Fraction,
    cards: Sequence[CardLoad],
    history: Busyness,
    *,
    policy: str = "adaptive",
    whole_waiting: str | None = None,
    reserve: int = DEFAULT_RESERVE_CARDS,
) -> list[str]:
    """The cards that fit ``share``, best first by the product's rule (at most ``MOST_RANKED``)."""
    states, need = card_states(cards, share)
    placement = decide(policy, states, need, history, whole_waiting, reserve=reserve)
    if placement is None:  # fewer than two fit: the hub names none; the replay takes the one that fits
        return [state.key for state in states if state.free >= need]
    return [state.key for state in placement.ranked]


def what_waits(whole_card_waits: bool, job_waits_for_pool: bool) -> str | None:
    """What waits for whole cards, in the hub's words (the replay sees lent jobs, which the hub does not yet)."""
    if whole_card_waits:
        return "a whole-card start"
    return "a lent job" if job_waits_for_pool else None


def preferred_claim(claim: Mapping[str, Any], uuids: Sequence[str], driver: str) -> dict[str, Any]:
    """``claim`` (fracnb's ResourceClaim, one ``exactly`` request) asking for these cards in order, then any."""
    made = copy.deepcopy(dict(claim))
    request = made["spec"]["devices"]["requests"][0]
    exactly = request.pop("exactly")
    options = []
    for rank, uuid in enumerate(uuids[:MOST_RANKED]):
        expression = f"device.attributes['{driver}'].uuid == '{uuid}'"
        selectors = [*exactly.get("selectors", []), {"cel": {"expression": expression}}]
        options.append({**exactly, "name": f"card-{rank}", "selectors": selectors})
    options.append({**exactly, "name": "any"})
    request["firstAvailable"] = options
    return made
