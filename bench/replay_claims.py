"""Cards on a DRA cluster, read from the scheduler's own allocations (each ResourceClaim's status). Pure.

kube-scheduler writes where a claim got its device to ``status.allocation.devices.results``: the
pool (one per node, as NVIDIA's driver publishes them), the device, and with consumable capacity
the memory it took. That is the card and the share the replay measures: no model in between.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

_UNITS = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}
_QUANTITY = re.compile(r"^(\d+)([A-Za-z]*)$")


def quantity_bytes(text: str) -> int:
    match = _QUANTITY.match(str(text))
    if not match or match.group(2) not in _UNITS:
        raise ValueError(f"not a byte quantity: {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


@dataclass(frozen=True)
class ClaimCard:
    card: str  # "node/device"
    share: Fraction  # of the card's memory


def owner_pod(claim: Mapping[str, Any]) -> str | None:
    """The pod a claim made from a template belongs to."""
    for owner in (claim.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("kind") == "Pod":
            return owner.get("name")
    return None


def claim_cards(claims: Iterable[Mapping[str, Any]], card_bytes: int) -> dict[str, ClaimCard]:
    """Pod name -> the card its claim was allocated and the share of it, for allocated claims."""
    cards = {}
    for claim in claims:
        pod = owner_pod(claim)
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        if pod is None or not results:
            continue
        result = results[0]
        consumed = (result.get("consumedCapacity") or {}).get("memory")
        share = Fraction(quantity_bytes(consumed), card_bytes) if consumed else Fraction(1)
        cards[pod] = ClaimCard(f"{result['pool']}/{result['device']}", min(share, Fraction(1)))
    return cards


def requested_share(claim: Mapping[str, Any], card_bytes: int) -> Fraction:
    """The share of a card a claim asks for: its memory request (its first ranked option's), or a whole card."""
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    first = requests[0] if requests else {}
    exactly = first.get("exactly") or (first.get("firstAvailable") or [{}])[0]
    memory = ((exactly.get("capacity") or {}).get("requests") or {}).get("memory")
    return Fraction(quantity_bytes(memory), card_bytes) if memory else Fraction(1)


def fits_on(share: Fraction, held: Mapping[str, Fraction], cards: Iterable[str]) -> bool:
    """Whether one of ``cards`` (with ``held`` shares taken) has room for ``share``."""
    return any(held.get(card, Fraction(0)) + share <= 1 for card in cards)
