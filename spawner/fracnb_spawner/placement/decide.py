"""Which card a new share should go to (``c.FractionalSpawner.placement``). Pure.

- ``spread``: the card whose holders are expected to be least busy, so that a busy cell shares its
  card with as few other busy cells as possible. It leaves ``reserve`` wholly free cards alone for
  whole-card starts, unless no other card fits.
- ``packed``: the fullest card that still fits, so that whole cards come free as servers end; a card
  whose holders are expected to keep ``PACK_BUSY_LIMIT`` or more of it busy comes after every quieter
  card that fits (packing need not stack a busy cell onto another).
- ``adaptive`` (the default): spread while nothing waits for whole cards; pack while something does
  (a whole-card start, a lent job or a whole-card batch pod waiting for the pool).

A holder's expected busyness is its kernels' live state where the hub knows it (busy now: 1, idle: 0), else
its user's share of busy time in the session history; a user without history counts as the
average user. The hub knows a holder is busy now from its pod's ``fracnb.io/busy-since`` (the fracnb service
writes it from the notebooks' session reports): a kernel busy for ``BUSY_NOW_SECONDS`` or longer runs a long
cell (:func:`busy_now`); a shorter stretch, or none, says nothing the history does not. The decision only ranks
cards for a new share: a running notebook is never moved.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from fracnb_spawner.common.units import format_bytes

POLICIES = ("adaptive", "packed", "spread")
SPREAD, PACK = "spread", "pack"
NO_HISTORY_AVERAGE = 0.5  # the average user's busy share while the session history has none
DEFAULT_RESERVE_CARDS = 2  # wholly free cards spreading keeps for whole-card starts (placement_reserve_cards)
PACK_BUSY_LIMIT = 1.0  # expected busy holders at which packing passes a card over for a quieter one
BUSY_NOW_SECONDS = 300  # busy this long (a long cell runs on): the holder counts as busy now (the replay's rule)
MOST_RANKED = 7  # a DRA claim's firstAvailable holds 8 subrequests: 7 named cards and one for any card
_NUMBERED = re.compile(r"^gpu-(\d+)$")  # the NVIDIA DRA driver names a card gpu-<minor>


@dataclass(frozen=True)
class Holder:
    """A server (or another pod) holding part of a card."""

    user: str  # "" when the pod is not a notebook of this hub's users
    busy_now: bool | None = None  # the meter's live state of its kernels; None: unknown


@dataclass(frozen=True)
class CardState:
    """One card a new share could use, as the hub sees it now."""

    key: str  # names the card: "driver/pool/device"
    node: str  # the node (DRA pool) it is on
    device: str  # the device's name on its node: "gpu-3"
    uuid: str  # the driver's uuid attribute ("GPU-..."); "" when it publishes none
    free: int  # bytes of memory not yet taken by claims
    capacity: int  # bytes of memory of the card
    holders: tuple[Holder, ...] = ()


@dataclass(frozen=True)
class Busyness:
    """Each user's share of busy time in the session history (0..1), and the average user's."""

    shares: Mapping[str, float]
    average: float

    def expected(self, holder: Holder) -> float:
        if holder.busy_now is not None:  # the live state, where known, says more than the past
            return 1.0 if holder.busy_now else 0.0
        return self.shares.get(holder.user, self.average) if holder.user else self.average


@dataclass(frozen=True)
class Placement:
    """The cards preferred for the new share, best first, and why."""

    policy: str  # the configured policy
    mode: str  # what it did this time: spread or pack
    ranked: tuple[CardState, ...]
    reason: str

    @property
    def uuids(self) -> list[str]:
        """The ranked cards' uuids, for a claim's preference (cards without one are left to the fallback)."""
        return [card.uuid for card in self.ranked if card.uuid]


def busy_now(since: str | None, now: datetime, after: float = BUSY_NOW_SECONDS) -> bool | None:
    """A holder's live state from its pod's ``fracnb.io/busy-since`` (RFC 3339) at ``now``: True when a kernel
    has been busy ``after`` seconds or longer; None (unknown: its history decides) otherwise, and for a value
    that is not a time."""
    if not since:
        return None
    try:
        moment = datetime.fromisoformat(since.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return True if (now - moment).total_seconds() >= after else None


def check_policy(value: object) -> str:
    """The policy, or ValueError naming the accepted values."""
    if value not in POLICIES:
        raise ValueError(f"{value!r} is not a placement policy; use one of {', '.join(POLICIES)}")
    return str(value)


def mode_of(policy: str, whole_waiting: str | None) -> str:
    """``adaptive`` packs only while something waits for whole cards."""
    if policy == "packed" or (policy == "adaptive" and whole_waiting):
        return PACK
    return SPREAD


def card_busy(card: CardState, busyness: Busyness) -> float:
    """How many of the card's holders are expected to be busy at a moment."""
    return sum(busyness.expected(holder) for holder in card.holders)


def check_reserve(value: int) -> int:
    """The number of reserved cards, or ValueError saying what is accepted."""
    if value < 0:
        raise ValueError(f"{value} is not a number of cards to keep free; use 0 (keep none) or more")
    return value


def is_whole_free(card: CardState) -> bool:
    return not card.holders and card.free >= card.capacity


def reserved(fitting: Sequence[CardState], reserve: int) -> set[str]:
    """The keys of the wholly free cards spreading leaves alone: the last ``reserve`` of them by key."""
    empty = sorted(card.key for card in fitting if is_whole_free(card))
    return set(empty[-reserve:]) if reserve > 0 else set()


def decide(
    policy: str,
    cards: Sequence[CardState],
    need: int,
    busyness: Busyness,
    whole_waiting: str | None = None,
    *,
    reserve: int = DEFAULT_RESERVE_CARDS,
) -> Placement | None:
    """Rank the cards that have ``need`` bytes free for a new share; None when fewer than two fit (no choice).

    ``whole_waiting``: what waits for whole cards, in words ("a whole-card start"), or None.
    ``reserve``: wholly free cards that spreading ranks last, kept for whole-card starts.
    """
    fitting = [card for card in cards if card.free >= need]
    if len(fitting) < 2:
        return None
    mode = mode_of(policy, whole_waiting)
    kept: set[str] = set()
    if mode == PACK:  # the fullest first, a card expected busy after the quieter ones; then most holders
        ranked = sorted(
            fitting, key=lambda c: (round(card_busy(c, busyness), 6) >= PACK_BUSY_LIMIT, c.free, -len(c.holders), c.key)
        )
    else:  # outside the reserve, the least busy first, then the fewest holders, then the most memory left
        kept = reserved(fitting, reserve)
        ranked = sorted(
            fitting, key=lambda c: (c.key in kept, round(card_busy(c, busyness), 6), len(c.holders), -c.free, c.key)
        )
    chosen = ranked[0]
    words = reason(chosen, mode, busyness, len(fitting), whole_waiting)
    if kept and chosen.key not in kept:
        words += f" ({len(kept)} wholly free card{'s' if len(kept) != 1 else ''} kept for whole-card starts)"
    elif chosen.key in kept:
        words += " (a card kept for whole-card starts: no other fits)"
    return Placement(policy, mode, tuple(ranked[:MOST_RANKED]), words)


def card_words(card: CardState) -> str:
    """``card 3 of dev-1``."""
    numbered = _NUMBERED.match(card.device)
    return f"card {numbered.group(1) if numbered else card.device} of {card.node}"


def busy_words(card: CardState, busyness: Busyness) -> str:
    """``1 busy holder of 6`` where the live state of every holder is known, else the expectation, saying how many
    holders are busy now: ``1.4 busy expected of 3 holders (1 busy now, the others from their busy time)``."""
    count = len(card.holders)
    if count == 0:
        return "no holder"
    if all(holder.busy_now is not None for holder in card.holders):
        busy = sum(1 for holder in card.holders if holder.busy_now)
        return f"{busy} busy holder{'s' if busy != 1 else ''} of {count}"
    of = f"of {count} holder" + ("s" if count != 1 else "")
    known = [holder for holder in card.holders if holder.busy_now is not None]
    if not known:
        return f"{card_busy(card, busyness):.1f} busy expected {of} (from their busy time)"
    now = sum(1 for holder in known if holder.busy_now)
    return f"{card_busy(card, busyness):.1f} busy expected {of} ({now} busy now, the others from their busy time)"


def reason(card: CardState, mode: str, busyness: Busyness, fitting: int, whole_waiting: str | None) -> str:
    """The decision in words, for the hub log and the pod's annotation."""
    if mode == PACK:
        taken = format_bytes(card.capacity - card.free)
        why = f"{whole_waiting} waits for whole cards" if whole_waiting else "placement packed"
        return (
            f"{card_words(card)}: the fullest of {fitting} cards that fit "
            f"({taken} of {format_bytes(card.capacity)} taken, {busy_words(card, busyness)}); {why}"
        )
    why = "nothing waits for whole cards" if whole_waiting is None else "placement spread"
    return f"{card_words(card)}: {busy_words(card, busyness)}, the least busy of {fitting} cards that fit; {why}"


def scheduler_policy(mode: str) -> str:
    """HAMi's per-pod card policy for a mode (``hami.io/gpu-scheduler-policy``)."""
    return "binpack" if mode == PACK else "spread"
