"""Borrowing training cards for notebook starts on a busy day (bench/replay_day.py runs it after the cluster settles).

A notebook start that waits for the development pool starts again on a training card an admin marks
borrowable (the run's ``BORROWABLE`` training cards): a share of a card other borrowers already use
(the fullest that fits, passing over busy ones: the product's packing, through bench/replay_placement.py), else a wholly
free card. With none, a batch job's card is taken only through fracnb's reclaim rule
(``plan_reclaims``: the fewest and youngest below notebooks' priority, at most
``BORROW_RECLAIMS_PER_STEP`` a minute); the job goes back to the queue from its last checkpoint.

On the training card the notebook sits above the batch jobs' priority: no job preempts it. While it
is in use it keeps the card. Once it is idle for the timeout under demand (``BORROWER_IDLE_UNDER_DEMAND``)
while a training job waits, it is stopped, its kernel's variables saved (hibernation): a cull that
loses nothing. This is the rule the product's service would apply; the replay applies it (modelled).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from bench.replay_claims import claim_cards
from bench.replay_jobs import is_job
from bench.replay_lending import reclaim_cards, victims_for
from bench.replay_placement import CardLoad, History, busyness, choose_cards

log = logging.getLogger("replay")
TRAINING = "training"
BORROW_SUFFIX = "-borrow"  # the profiles a borrowing start uses: "<kind>-borrow", on the training pool
BORROW_RECLAIMS_PER_STEP = 2  # assumption: batch jobs the service may stop for borrowers per minute
BORROWER_IDLE_UNDER_DEMAND = 300  # a borrower idle this long while a training job waits is stopped (hibernated)


def borrowing(profile: str) -> bool:
    return profile.endswith(BORROW_SUFFIX)


class Borrowing:
    """The day run's borrowing; mixed into ``DayRun``, whose state and I/O it uses."""

    setup: Any
    batch: Any
    claims: list[dict[str, Any]]
    card_bytes: int
    namespace: str
    card_uuid: dict[str, str]
    borrowed_peak: int

    async def borrow(self, moment: int, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Move starts that wait for the development pool onto borrowable training cards."""
        waiting = [(desk, share) for desk, share in self._waiting_starts(pods) if not desk.reclaimed_for]
        if not waiting:
            return pods
        by_name = {p["metadata"]["name"]: p for p in pods}
        placed = claim_cards(self.claims, self.card_bytes)
        training = self.cards_by_pool().get(TRAINING, [])
        held: dict[str, Fraction] = {}
        for claim in placed.values():
            held[claim.card] = held.get(claim.card, Fraction(0)) + claim.share
        moved, reclaims = set(), 0
        for desk, share in waiting:
            loads = self.card_loads(training, held)
            ranked = choose_cards(share, loads, busyness(self.histories), policy="packed")
            if not ranked and reclaims < BORROW_RECLAIMS_PER_STEP:
                cards = reclaim_cards(training, placed, by_name, self.namespace, self.card_bytes)
                left = BORROW_RECLAIMS_PER_STEP - reclaims
                victims = victims_for([(desk.spawner.pod_name, share)], cards, self.namespace, self.card_bytes, left)
                for victim in victims:
                    self.batch.reclaimed(victim, moment)
                    await self.delete_pod(victim)
                    held.pop(placed[victim].card, None)
                    ranked = [placed[victim].card]
                reclaims += len(victims)
            if not ranked:
                continue
            held[ranked[0]] = held.get(ranked[0], Fraction(0)) + share
            await self.stop(desk)
            profile = desk.spawner.user_options["profile"]
            desk.spawner.user_options = {"profile": f"{profile}{BORROW_SUFFIX}"}
            node = ranked[0].split("/")[0]
            same_node = [card for card in ranked if card.startswith(f"{node}/")]
            desk.spawner.card_preference = (node, [self.card_uuid[card] for card in same_node])
            desk.task = desk.spawner.start()
            moved.add(desk.name)
            log.info("%s: %s borrows %s", self.setup.name, desk.name, ranked[0])
        return await self.settle(expecting=moved) if moved else pods

    def borrowers_to_stop(self, pods: list[dict[str, Any]], moment: int) -> dict[str, str]:
        """Borrowers idle for the timeout under demand while a training job waits: stopped (hibernated)."""
        if not any(is_job(p) and not p["spec"].get("nodeName") for p in pods):
            return {}
        return {
            d.name: "demand"
            for d in self.desks.values()
            if d.running_since is not None
            and borrowing(d.spawner.user_options.get("profile", ""))
            and d.kernel_busy() is None
            and moment - d.hub_activity >= BORROWER_IDLE_UNDER_DEMAND
        }

    def note_borrowed(self, holders: list[Any]) -> None:
        cards = {h.card for h in holders if h.notebook and h.pool == TRAINING}
        self.borrowed_peak = max(self.borrowed_peak, len(cards))

    # ---- provided by DayRun ------------------------------------------------------------------------------

    desks: dict[str, Any]
    histories: dict[str, History]

    def _waiting_starts(self, pods: list[dict[str, Any]]) -> list[tuple[Any, Fraction]]:
        raise NotImplementedError

    def card_loads(self, cards: list[str], held: Mapping[str, Fraction]) -> list[CardLoad]:
        raise NotImplementedError

    def cards_by_pool(self) -> Mapping[str, list[str]]:
        raise NotImplementedError

    async def stop(self, desk: Any) -> None:
        raise NotImplementedError

    async def delete_pod(self, name: str) -> None:
        raise NotImplementedError

    async def settle(self, expecting: frozenset[str] | set[str] = frozenset()) -> list[dict[str, Any]]:
        raise NotImplementedError
