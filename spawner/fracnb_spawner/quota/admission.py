"""Admitting a spawn by quota: what the cluster's pods hold, plus what this hub has admitted.

The check and the reservation run under the ledger's lock against pods listed fresh, so
concurrent spawns never pass a quota together that each alone fits, and a hub restart neither
forgets nor double-counts. The spawn form reads the same counts from KubeSpawner's pod reflector
instead (no request per form load); the spawn itself counts exactly.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from fracnb_spawner.common.errors import InvalidRequestError
from fracnb_spawner.quota.ledger import QuotaLedger
from fracnb_spawner.quota.policy import Allocation, QuotaDecision, QuotaPolicy, check_request
from fracnb_spawner.quota.words import quota_refusal


@dataclass(frozen=True)
class Applicant:
    """Whose spawn asks: the user, their server, and their groups with each group's members."""

    user: str
    server: str
    groups: Mapping[str, Iterable[str]]


def decision(
    policy: QuotaPolicy, ledger: QuotaLedger, held: Iterable[Allocation], applicant: Applicant, fraction: Fraction
) -> QuotaDecision:
    """The quota decision for ``fraction`` more GPUs, counting what the cluster holds and the ledger reserved."""
    return check_request(
        policy, ledger.allocations(held), user=applicant.user, groups=applicant.groups,
        server=applicant.server, fraction=fraction,
    )  # fmt: skip


async def admit(
    policy: QuotaPolicy,
    ledger: QuotaLedger,
    held: Callable[[], Awaitable[list[Allocation]]],
    applicant: Applicant,
    request: Allocation,
    *,
    reserve: bool,
) -> None:
    """Refuse ``request`` with a 403 when over quota; with ``reserve``, hold it until its pod exists."""
    async with ledger.lock:
        found = decision(policy, ledger, await held(), applicant, request.fraction)
        if not found.allowed:
            raise InvalidRequestError(403, quota_refusal(found), reason="quota")
        if reserve:
            ledger.reserve(request)
