"""Lending development cards to the training backlog and taking them back for notebooks. Pure.

Lending is the batch side's rule, modelled (:func:`cards_to_lend`): a waiting training job may borrow
a development card only while no notebook start waits for the pool and the card is wholly free (a
job claims a whole card), one job per free card.

Taking cards back is the product's rule, not a copy: fracnb's reclaim
(``fracnb_spawner.reclaim.victims.plan_reclaims``) chooses which lower-priority pods to evict for
the notebooks waiting in the queue, in queue order, at most ``per_step`` at a time. This module
only describes the replay's development cards to it (:func:`reclaim_cards`): each card with the
pods whose allocated claims hold it, read as the service reads them
(``fracnb_spawner.reclaim.cluster.holder_of``: priority, creation time, notebook or not, leaving).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from bench.replay_claims import ClaimCard
from fracnb_spawner.reclaim.cluster import holder_of
from fracnb_spawner.reclaim.victims import Card, Need, Policy, plan_reclaims

RECLAIMS_PER_STEP = 10  # assumption: evictions the service may make per minute (the replay's step)
POLICY = Policy(priority_below=0)  # pods below notebooks' priority (the batch jobs' -100), any namespace


def cards_to_lend(
    free_cards: Sequence[str], waiting_notebooks: int, waiting_jobs: Sequence[str]
) -> list[tuple[str, str]]:
    """(job pod, card) pairs to lend: none while a notebook start waits for the pool, else one job per free card."""
    if waiting_notebooks:
        return []
    return list(zip(waiting_jobs, free_cards, strict=False))


def reclaim_cards(
    cards: Sequence[str],
    placed: Mapping[str, ClaimCard],
    pods: Mapping[str, Mapping[str, Any]],
    namespace: str,
    card_bytes: int,
) -> list[Card]:
    """The cards as the reclaim rule takes them: ``cards`` ("node/device"), ``placed`` (pod -> its claim's
    card and share), ``pods`` by name; a claim whose pod is not in ``pods`` is held like a notebook."""
    holders: dict[str, list[Any]] = {}
    for pod, claim in placed.items():
        amount = round(claim.share * card_bytes)
        holders.setdefault(claim.card, []).append(holder_of(pods.get(pod), (namespace, pod), amount))
    return [Card(card, card.split("/")[0], card_bytes, True, tuple(holders.get(card, ()))) for card in cards]


def victims_for(
    waiting: Sequence[tuple[str, Fraction]],
    cards: Sequence[Card],
    namespace: str,
    card_bytes: int,
    per_step: int = RECLAIMS_PER_STEP,
) -> list[str]:
    """The pods the product's rule evicts for ``waiting`` (notebook pod, share of a card; in queue order)."""
    waiters = [((namespace, pod), Need(round(share * card_bytes))) for pod, share in waiting]
    victims = [victim for victim, _waiter in plan_reclaims(waiters, cards, POLICY, left=per_step)]
    return [name for _namespace, name in dict.fromkeys(victims)]
