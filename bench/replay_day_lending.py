"""The lending step of a replayed day on a DRA cluster (bench/replay_day.py runs it after the cluster settles).

When a notebook start waits for a slot in the development pool, fracnb's reclaim rule
(bench/replay_lending.py) chooses lent training jobs to evict; the run deletes their pods, and the
clock waits for those starts to run (or for the settle limit). With no start waiting, free
development cards are lent to training jobs that wait: each such job's pod is replaced by one
asking for the development pool. A job sent there that lost its card meanwhile goes back to the
training pool.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from bench.replay_claims import claim_cards
from bench.replay_jobs import is_job
from bench.replay_lending import cards_to_lend, reclaim_cards, victims_for
from bench.replay_settle import asked_share, waits_for_a_slot

log = logging.getLogger("replay")
DEV, TRAINING = "development", "training"
POOL_LABEL = "node-pool"


def pool_of(pod: Mapping[str, Any]) -> str:
    return ((pod.get("spec") or {}).get("nodeSelector") or {}).get(POOL_LABEL, "")


class Lending:
    """The day run's lending and reclaim; mixed into ``DayRun``, whose state and I/O it uses."""

    setup: Any
    batch: Any
    claims: list[dict[str, Any]]
    card_bytes: int
    namespace: str
    nodes: list[dict[str, Any]]

    def _waiting_starts(self, pods: list[dict[str, Any]]) -> list[tuple[Any, Fraction]]:
        """Notebook starts that wait for a slot in the development pool (queue order), with the share each asks."""
        by_name, devices, found = {p["metadata"]["name"]: p for p in pods}, self.devices(), []
        for desk in sorted(self._starting(), key=lambda d: (d.attempt_since, d.attempt_real)):
            pod = by_name.get(desk.spawner.pod_name)
            if pod is not None and pool_of(pod) == DEV and waits_for_a_slot(pod, self.nodes, pods, devices):
                found.append((desk, asked_share(pod)))
        return found

    async def lend_or_reclaim(self, moment: int, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Reclaim lent cards for waiting notebook starts and wait for those starts; else lend free cards."""
        placed = claim_cards(self.claims, self.card_bytes)
        dev_cards = self.cards_by_pool().get(DEV, [])
        waiting = self._waiting_starts(pods)
        if waiting:
            by_name = {p["metadata"]["name"]: p for p in pods}
            cards = reclaim_cards(dev_cards, placed, by_name, self.namespace, self.card_bytes)
            asks = [(desk.spawner.pod_name, share) for desk, share in waiting]
            victims = victims_for(asks, cards, self.namespace, self.card_bytes)
            if not victims:
                return pods
            for pod in victims:
                self.batch.reclaimed(pod, moment)
                await self.delete_pod(pod)
            for desk, _ in waiting:
                desk.reclaimed_for = True
            log.info("%s: reclaimed %s for %d waiting starts", self.setup.name, victims, len(waiting))
            return await self.settle(expecting={desk.name for desk, _ in waiting})
        held = {claim.card for claim in placed.values()}
        unbound = [p for p in pods if is_job(p) and not p["spec"].get("nodeName")]
        free = [card for card in dev_cards if card not in held]
        lend = cards_to_lend(free, len(waiting), [p["metadata"]["name"] for p in unbound if pool_of(p) == TRAINING])
        stray = [p["metadata"]["name"] for p in unbound if pool_of(p) == DEV]  # lost its card: back to training
        moves = [(pod, DEV) for pod, _ in lend] + [(pod, TRAINING) for pod in stray]
        for pod, pool in moves:
            await self.delete_pod(pod)
            await self.create_job(self.batch.move(pod, pool))
        return await self.settle() if moves else pods

    # ---- provided by DayRun ------------------------------------------------------------------------------

    def devices(self) -> Any:
        raise NotImplementedError

    def _starting(self) -> list[Any]:
        raise NotImplementedError

    def cards_by_pool(self) -> dict[str, list[str]]:
        raise NotImplementedError

    async def delete_pod(self, name: str) -> None:
        raise NotImplementedError

    async def create_job(self, name: str) -> None:
        raise NotImplementedError

    async def settle(self, expecting: frozenset[str] | set[str] = frozenset()) -> list[dict[str, Any]]:
        raise NotImplementedError
