"""The adaptive placement step of a replayed day on a DRA cluster (bench/replay_day.py calls it per start).

Before a start, the run decides the card by the hub's own rule (``fracnb_spawner.placement.decide``,
through bench/replay_placement.py) from what the hub can know: the claims' allocations (which card
holds what), each holder's user history of busy time and the meter's live busy state (a long cell:
busy now). It hands the choice to the spawner, which asks for it in its
ResourceClaim (``firstAvailable``, ranked cards by ``uuid``) and pins the pod to the card's node;
kube-scheduler's allocator then allocates the claim. Starts in one step are decided in turn, each
seeing the shares the ones before it asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from bench.replay_claims import claim_cards
from bench.replay_jobs import is_job
from bench.replay_placement import JOB, CardLoad, History, busyness, choose_cards, holder, preferred_claim, what_waits

HOSTNAME = "kubernetes.io/hostname"
DEV = "development"


def placed_spawner_class() -> type:
    """FractionalSpawner asking for the run's chosen cards: ``card_preference`` = (node, [uuid, ...]) or None."""
    from fracnb_spawner.spawner import FractionalSpawner
    from fracnb_testbed.dra import DRIVER

    class PlacedSpawner(FractionalSpawner):
        card_preference: tuple[str, list[str]] | None = None

        async def load_user_options(self) -> Any:
            result = await super().load_user_options()
            if self.card_preference is not None:
                wanted = self.companions.wanted
                uuids = self.card_preference[1]
                self.companions.wanted = [
                    preferred_claim(obj, uuids, DRIVER) if obj.get("kind") == "ResourceClaim" else obj for obj in wanted
                ]
            return result

        async def get_pod_manifest(self) -> Any:
            pod = await super().get_pod_manifest()
            if self.card_preference is not None:
                pod.spec.node_selector = {**(pod.spec.node_selector or {}), HOSTNAME: self.card_preference[0]}
            return pod

    return PlacedSpawner


class Placing:
    """The day run's adaptive placement; mixed into ``DayRun``, whose state it reads."""

    setup: Any
    claims: list[dict[str, Any]]
    card_bytes: int
    desks: dict[str, Any]
    card_uuid: dict[str, str]
    histories: dict[str, History]
    last_pods: list[dict[str, Any]]
    tentative: dict[str, Fraction]
    preferred: dict[str, str]  # pod -> the card chosen for its latest start

    def note_history(self, desk: Any, busy: bool, seconds: float) -> None:
        """The hub's session history: a running server's time, and its kernel's busy time."""
        before = self.histories.get(desk.name, History())
        self.histories[desk.name] = History(before.server_seconds + seconds, before.busy_seconds + busy * seconds)

    def card_loads(self, cards: list[str], held: Mapping[str, Fraction]) -> list[CardLoad]:
        """The cards with the shares held on them and their holders as the hub sees them (a job: busy)."""
        owners = {d.spawner.pod_name: d for d in self.desks.values()}
        holders: dict[str, list[Any]] = {}
        for pod, placed in claim_cards(self.claims, self.card_bytes).items():
            desk = owners.get(pod)
            if desk is None:
                holders.setdefault(placed.card, []).append(JOB)
                continue
            segment = desk.kernel_busy()
            busy_for = desk.clock.now - segment.start if segment is not None else None
            holders.setdefault(placed.card, []).append(holder(desk.name, busy_for))
        return [CardLoad(card, held.get(card, Fraction(0)), tuple(holders.get(card, ()))) for card in cards]

    def _whole_waiting(self) -> str | None:
        whole_waits = any(
            d.spawner.user_options.get("profile") == "whole" and d.attempt_since < self.previous
            for d in self._starting()
        )
        job_waits = self.setup.lending and any(is_job(p) and not p["spec"].get("nodeName") for p in self.last_pods)
        return what_waits(whole_waits, job_waits)

    def prefer_card(self, desk: Any, share: Fraction) -> None:
        """Decide the card for ``desk``'s start of ``share`` and hand it to its spawner."""
        held = dict(self.tentative)
        for placed in claim_cards(self.claims, self.card_bytes).values():
            held[placed.card] = held.get(placed.card, Fraction(0)) + placed.share
        cards = self.cards_by_pool().get(DEV, [])
        history = busyness(self.histories)
        ranked = choose_cards(share, self.card_loads(cards, held), history, whole_waiting=self._whole_waiting())
        if not ranked:
            desk.spawner.card_preference = None  # nothing fits: the start waits in the queue as any would
            self.preferred.pop(desk.spawner.pod_name, None)
            return
        node = ranked[0].split("/")[0]
        same_node = [card for card in ranked if card.startswith(f"{node}/")]
        desk.spawner.card_preference = (node, [self.card_uuid[card] for card in same_node])
        self.tentative[ranked[0]] = self.tentative.get(ranked[0], Fraction(0)) + share
        self.preferred[desk.spawner.pod_name] = ranked[0]

    def preferences_kept(self) -> tuple[int, int]:
        """(claims allocated the card the run chose, claims allocated after a choice): that the allocator followed."""
        placed = claim_cards(self.claims, self.card_bytes)
        chosen = {pod: card for pod, card in self.preferred.items() if pod in placed}
        return sum(placed[pod].card == card for pod, card in chosen.items()), len(chosen)

    # ---- provided by DayRun ------------------------------------------------------------------------------

    previous: int

    def _starting(self) -> list[Any]:
        raise NotImplementedError

    def cards_by_pool(self) -> Mapping[str, list[str]]:
        raise NotImplementedError
