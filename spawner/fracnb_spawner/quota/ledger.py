"""The hub's GPU allocations: pods in the cluster plus spawns admitted but not yet visible as pods.

Quota checks and admissions run under one lock in the hub process, so concurrent spawns
can never together pass a quota that each alone fits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from fracnb_spawner.quota.policy import Allocation


class QuotaLedger:
    """One hub process's reservations and the lock its admissions take (:class:`fracnb_spawner.hubstate.HubState`)."""

    def __init__(self) -> None:
        self._reserved: dict[tuple[str, str], Allocation] = {}
        self.lock = asyncio.Lock()

    def reserved(self, user: str, server: str) -> Allocation | None:
        return self._reserved.get((user, server))

    def allocations(self, from_pods: Iterable[Allocation]) -> list[Allocation]:
        """Pods win over reservations for the same server; reservations cover pods not created yet."""
        merged = {(a.user, a.server): a for a in self._reserved.values()}
        merged.update({(a.user, a.server): a for a in from_pods})
        return list(merged.values())

    def reserve(self, allocation: Allocation) -> None:
        self._reserved[(allocation.user, allocation.server)] = allocation

    def release(self, user: str, server: str) -> None:
        self._reserved.pop((user, server), None)
