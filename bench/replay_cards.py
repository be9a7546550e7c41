"""Which physical card a time-sliced share lands on: the NVIDIA device plugin's choice, modelled.

This is the replay's one modelled placement (the DRA run reads its cards from the scheduler's own
allocations). The scheduler only sees a node's count of ``nvidia.com/gpu.shared`` replicas; the
kubelet asks the device plugin which replicas to give (``GetPreferredAllocation``, with the IDs
still available), hence which card. The rule, as the plugin documents it (v0.20.0,
``--shared-devices-allocation-policy``, config ``flags.plugin.sharedDevicesAllocationPolicy``):

- replicas are picked one at a time, greedily; a card's *allocated* count is its replicas minus
  those still available, plus those picked so far in this request;
- ``distributed`` (the default) takes a replica of the card with the fewest allocated,
  ``packed`` of the card with the most; only cards with a replica still available compete;
- between cards the policy ranks equal, the one picked from least in this request wins; after
  that the plugin's order is whatever Go's map iteration gives (unspecified), and the model
  takes the lowest index;
- whole GPUs (no replicas) take the NVLink-aligned allocator instead and ignore the policy;
  the model gives a one-GPU request the lowest free card.

tests/bench/test_replay_cards.py checks this against the cases of the plugin's own allocation
tests. Pure bookkeeping, fed with what the real scheduler decided.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

POLICIES = ("distributed", "packed")


class AllocationError(ValueError):
    """Fewer replicas available than the request asks for."""


def choose_replicas(total: Sequence[int], allocated: Sequence[int], size: int, policy: str) -> list[int]:
    """The card of each of ``size`` replicas, in the order the plugin picks them.

    ``total[i]`` replicas exist on card i, ``allocated[i]`` of them are taken.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown allocation policy {policy!r}; one of {POLICIES}")
    taken = list(allocated)
    picked = [0] * len(total)
    if sum(t - a for t, a in zip(total, allocated, strict=True)) < size:
        raise AllocationError(f"{size} replicas asked for, fewer available")
    cards = []
    for _ in range(size):
        candidates = [i for i in range(len(total)) if taken[i] < total[i]]
        sign = -1 if policy == "packed" else 1
        best = min(candidates, key=lambda i: (sign * taken[i], picked[i], i))
        taken[best] += 1
        picked[best] += 1
        cards.append(best)
    return cards


@dataclass(frozen=True)
class Placement:
    card: str  # "node/index"
    share: Fraction  # of that card


@dataclass
class NodeCards:
    cards: int
    replicas: int  # per card; 1 for whole GPUs
    policy: str = "distributed"
    used: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.used:
            self.used = [0] * self.cards


class CardModel:
    """Cards per node and the replica each pod holds, in the order pods were bound."""

    def __init__(self, nodes: dict[str, tuple[int, int, str]]) -> None:
        """``nodes``: node name -> (cards, replicas per card, the device plugin's allocation policy)."""
        self.nodes = {name: NodeCards(cards, replicas, policy) for name, (cards, replicas, policy) in nodes.items()}
        self.placements: dict[str, Placement] = {}
        self._index: dict[str, tuple[str, int]] = {}

    def all_cards(self) -> list[str]:
        return [f"{name}/{index}" for name, node in self.nodes.items() for index in range(node.cards)]

    def place(self, pod: str, node: str) -> Placement:
        """Give ``pod`` (bound to ``node``, holding one replica or one whole GPU) a card."""
        if pod in self.placements:
            return self.placements[pod]
        cards = self.nodes[node]
        if cards.replicas == 1:
            free = [i for i in range(cards.cards) if cards.used[i] == 0]
            if not free:
                raise AllocationError(f"node {node} has no free GPU for {pod}: the scheduler and the model disagree")
            index = free[0]
        else:
            try:
                (index,) = choose_replicas([cards.replicas] * cards.cards, cards.used, 1, cards.policy)
            except AllocationError:
                raise AllocationError(
                    f"node {node} has no free replica for {pod}: the scheduler and the model disagree"
                ) from None
        cards.used[index] += 1
        placement = Placement(f"{node}/{index}", Fraction(1, cards.replicas))
        self.placements[pod] = placement
        self._index[pod] = (node, index)
        return placement

    def release(self, pod: str) -> None:
        if pod not in self._index:
            return
        node, index = self._index.pop(pod)
        self.nodes[node].used[index] -= 1
        del self.placements[pod]
