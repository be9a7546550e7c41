"""Which lower-priority pods to evict so that a waiting notebook fits on one card. Pure.

kube-scheduler preempts lower-priority pods for an extended resource by itself. For a DRA claim it
does not (1.36: "Preemption is not helpful for scheduling"), so the fracnb service evicts, and this
module says whom. The cards and their holders come in as literal records (:class:`Card`,
:class:`Holder`), whatever the backend, so that a benchmark's model and the service share the rule:

- A notebook that fits now (counting what pods already leaving will free) evicts no one.
- Only *reclaimable* holders are victims: below the policy's priority and the notebook's own, in
  a namespace the policy names, and never a notebook.
- The fewest victims (pods: one holding two cards counts once), then the youngest (they lose the
  least work), on one card: a share of a shared card (or, as the hub places it, an unshared card
  taken whole), or ``cards`` whole cards of one node. Between equal choices, a card that already
  holds shares goes first, so that whole cards stay whole for whole-card work.
- PodDisruptionBudgets (:class:`Budget`) are respected: a choice never takes more pods of a
  budget than it allows now.
- :func:`evictions_left` bounds the evictions per minute; :func:`plan_reclaims` spends them on
  the waiting notebooks in queue order, the earlier choices counted when making the later ones.
- A notebook that may also borrow a card of another pool (docs/lending.md) has a need per pool, its own
  first (:func:`choose_among`): it evicts nothing while one of them fits now, and on the borrowable pool
  only when its own pool's reclaimable pods cannot make room.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

PodKey = tuple[str, str]  # namespace, name
COMBINATIONS_LIMIT = 10_000  # the most sets of one size tried on one card (holders per card are few)


@dataclass(frozen=True)
class Holder:
    """A pod holding part of a card."""

    pod: PodKey
    amount: int  # what it holds of the card, in the card's unit (bytes of memory); a whole-card claim holds all
    priority: int  # its spec.priority
    created: datetime  # the younger, the less work an eviction loses
    notebook: bool = False  # a JupyterHub server: never evicted
    leaving: bool = False  # terminating already (evicted earlier): its amount is freed soon; not a victim again


@dataclass(frozen=True)
class Card:
    """One GPU (a DRA device) and the pods holding it."""

    key: str  # names the card: "driver/pool/device"
    group: str  # its node (DRA pool): several whole cards for one pod come from one group
    capacity: int  # in the holders' unit (bytes of memory)
    shared: bool = True  # shares may be placed on it (DRA allowMultipleAllocations); False: whole claims only
    holders: tuple[Holder, ...] = ()


@dataclass(frozen=True)
class Need:
    """What the waiting notebook asks: ``amount`` of one shared card, or (``amount`` None) ``cards`` whole cards."""

    amount: int | None
    cards: int = 1
    priority: int = 0  # the notebook's own spec.priority: only pods below it are reclaimed
    usable: frozenset[str] | None = None  # the keys of the cards it may use (product, node selector); None: any


@dataclass(frozen=True)
class Policy:
    """Which pods may be reclaimed (``c.FracnbReclaim``)."""

    priority_below: int = 0  # pods whose priority is below this (and below the notebook's)
    namespaces: frozenset[str] = frozenset()  # in these namespaces; empty: any namespace


@dataclass(frozen=True)
class Budget:
    """A PodDisruptionBudget: of ``pods``, at most ``allowed`` may be evicted now (its status.disruptionsAllowed)."""

    pods: frozenset[PodKey]
    allowed: int


@dataclass(frozen=True)
class Choice:
    """The pods to evict (youngest first) and the cards the notebook would use; no victims: it fits now."""

    victims: tuple[PodKey, ...]
    cards: tuple[str, ...]
    victim_created: tuple[datetime, ...] = field(default=(), compare=False)


def reclaimable(holder: Holder, need: Need, policy: Policy) -> bool:
    """Whether ``holder`` may be evicted for ``need`` under ``policy``."""
    return (
        not holder.notebook
        and not holder.leaving
        and holder.priority < min(policy.priority_below, need.priority)
        and (not policy.namespaces or holder.pod[0] in policy.namespaces)
    )


def within_budgets(victims: Iterable[PodKey], budgets: Sequence[Budget]) -> bool:
    """Whether evicting ``victims`` takes no budget below zero."""
    chosen = set(victims)
    return all(len(chosen & budget.pods) <= budget.allowed for budget in budgets)


def _staying(card: Card) -> int:
    return sum(holder.amount for holder in card.holders if not holder.leaving)


def _cost(victims: Sequence[Holder]) -> tuple[int, float]:
    """Fewest first, then youngest (the latest creation times)."""
    return len(victims), -sum(holder.created.timestamp() for holder in victims)


def _share_victims(
    amount: int, need: Need, card: Card, policy: Policy, budgets: Sequence[Budget]
) -> list[Holder] | None:
    """The cheapest holders of ``card`` whose eviction leaves room for ``amount``; None if none do."""
    missing = amount - (card.capacity - _staying(card))
    if missing <= 0:
        return []
    candidates = sorted(
        (holder for holder in card.holders if reclaimable(holder, need, policy)),
        key=lambda holder: holder.created,
        reverse=True,
    )
    largest_first = sorted((holder.amount for holder in candidates), reverse=True)
    fewest = next((n for n in range(1, len(candidates) + 1) if sum(largest_first[:n]) >= missing), None)
    if fewest is None:
        return None
    for size in range(fewest, len(candidates) + 1):
        sets = itertools.islice(itertools.combinations(candidates, size), COMBINATIONS_LIMIT)
        fitting = [
            list(found)
            for found in sets
            if sum(holder.amount for holder in found) >= missing
            and within_budgets((holder.pod for holder in found), budgets)
        ]
        if fitting:
            return min(fitting, key=_cost)
    return None


def _distinct(holders: Iterable[Holder]) -> list[Holder]:
    """Each pod once: a pod whose claim holds several cards is one victim, however many cards it frees."""
    seen: dict[PodKey, Holder] = {}
    for holder in holders:
        seen.setdefault(holder.pod, holder)
    return list(seen.values())


def _clearing(card: Card, need: Need, policy: Policy) -> list[Holder] | None:
    """The staying holders of ``card``, when every one of them may be evicted; None when one may not."""
    staying = [holder for holder in card.holders if not holder.leaving]
    return staying if all(reclaimable(holder, need, policy) for holder in staying) else None


def _whole_victims(
    need: Need, cards: Sequence[Card], policy: Policy, budgets: Sequence[Budget]
) -> tuple[list[Card], list[Holder]] | None:
    """The cheapest ``need.cards`` cards of one group whose staying holders may all be evicted, and those
    holders. Sets of cards are compared by the pods they evict: one pod holding two cards frees both."""
    freeable = sorted((card for card in cards if _clearing(card, need, policy) is not None), key=lambda c: c.key)
    best: tuple[tuple[int, float], list[Card], list[Holder]] | None = None
    for taken in itertools.islice(itertools.combinations(freeable, need.cards), COMBINATIONS_LIMIT):
        victims = _distinct(holder for card in taken for holder in card.holders if not holder.leaving)
        cost = _cost(victims)
        if within_budgets((holder.pod for holder in victims), budgets) and (best is None or cost < best[0]):
            best = (cost, list(taken), victims)
    return None if best is None else (best[1], best[2])


def _whole_card(need: Need, card: Card, policy: Policy, budgets: Sequence[Budget]) -> list[Holder] | None:
    """A memory slice on a card that takes no shares: the card whole, so every staying holder leaves
    (as the hub places a slice on an untouched unshared device when no shared one has room)."""
    victims = _clearing(card, need, policy)
    if victims is None or card.capacity < (need.amount or 0):
        return None
    return victims if within_budgets((holder.pod for holder in victims), budgets) else None


def _choice(victims: Sequence[Holder], cards: Sequence[Card]) -> Choice:
    youngest_first = sorted(_distinct(victims), key=lambda holder: holder.created, reverse=True)
    return Choice(
        tuple(holder.pod for holder in youngest_first),
        tuple(card.key for card in cards),
        tuple(holder.created for holder in youngest_first),
    )


def choose_victims(need: Need, cards: Sequence[Card], policy: Policy, budgets: Sequence[Budget] = ()) -> Choice | None:
    """The pods to evict so that ``need`` fits; ``Choice(victims=())`` when it fits now; None when no
    reclaimable pods can make room (the notebook waits as it would without reclaim)."""
    options: list[tuple[tuple[int, float, int, int], list[Holder], list[Card]]] = []
    cards = [card for card in cards if need.usable is None or card.key in need.usable]
    if need.amount is not None:
        for card in cards:
            victims = (
                _share_victims(need.amount, need, card, policy, budgets)
                if card.shared
                else _whole_card(need, card, policy, budgets)
            )
            if victims is not None:
                untouched = int(not card.shared or not any(not holder.leaving for holder in card.holders))
                left = card.capacity - _staying(card) + sum(holder.amount for holder in victims) - need.amount
                # fewest, youngest; then a card already shared (whole ones stay whole); then the tightest fit
                options.append(((*_cost(victims), untouched, left), victims, [card]))
    else:
        groups: dict[str, list[Card]] = {}
        for card in cards:
            groups.setdefault(card.group, []).append(card)
        for group in groups.values():
            found = _whole_victims(need, group, policy, budgets)
            if found is not None:
                taken, victims = found
                options.append(((*_cost(victims), 0, 0), victims, taken))
    if not options:
        return None
    _key, victims, taken = min(options, key=lambda option: option[0])
    return _choice(victims, taken)


def choose_among(
    needs: Sequence[Need], cards: Sequence[Card], policy: Policy, budgets: Sequence[Budget] = ()
) -> tuple[Need, Choice] | None:
    """The first of ``needs`` (alternatives in order of preference: its own pool, then a borrowable one) whose
    victims may make room, with its choice; the one that fits now, if any, since that needs no eviction."""
    found = [(need, choice) for need in needs if (choice := choose_victims(need, cards, policy, budgets)) is not None]
    return next((item for item in found if not item[1].victims), found[0] if found else None)


def evictions_left(recent: Iterable[float], now: float, per_minute: int) -> int:
    """How many more evictions the limit allows now, given the (monotonic) times of recent ones."""
    return max(0, per_minute - sum(1 for moment in recent if now - moment < 60.0))


def _after(cards: Sequence[Card], choice: Choice, need: Need, waiter: PodKey) -> list[Card]:
    """The cards once ``choice``'s victims leave and the waiter holds its part."""
    victims = set(choice.victims)
    updated = []
    for card in cards:
        holders = tuple(replace(holder, leaving=True) if holder.pod in victims else holder for holder in card.holders)
        if card.key in choice.cards:
            amount = card.capacity if need.amount is None else need.amount
            holders += (Holder(waiter, amount, need.priority, datetime.max, notebook=True),)
        updated.append(replace(card, holders=holders))
    return updated


def plan_reclaims(
    waiters: Sequence[tuple[PodKey, Need | Sequence[Need]]],
    cards: Sequence[Card],
    policy: Policy,
    budgets: Sequence[Budget] = (),
    left: int = 0,
) -> list[tuple[PodKey, PodKey]]:
    """(victim, waiting notebook) pairs to evict now, for ``waiters`` in queue order, at most ``left``; a waiter's
    need, or its alternatives (:func:`choose_among`).

    Each waiter's choice counts the earlier ones' (their victims leaving, their parts held). When the
    limit runs out in the middle of a choice, its youngest victims go now and the rest at a later pass,
    which sees them leaving.
    """
    evictions: list[tuple[PodKey, PodKey]] = []
    remaining = list(budgets)
    for waiter, wanted in waiters:
        if len(evictions) >= left:
            break
        chosen = choose_among((wanted,) if isinstance(wanted, Need) else wanted, cards, policy, remaining)
        if chosen is None:
            continue
        need, choice = chosen
        now_evicted = choice.victims[: left - len(evictions)]
        evictions += [(victim, waiter) for victim in now_evicted]
        gone = set(now_evicted)
        remaining = [replace(budget, allowed=budget.allowed - len(budget.pods & gone)) for budget in remaining]
        cards = _after(cards, choice, need, waiter)
    return evictions
