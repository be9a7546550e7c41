"""Which physical card a pod's GPU share lands on: the NVIDIA device plugin's choice, modelled.

The scheduler only sees a node's count of ``nvidia.com/gpu.shared`` replicas; the device plugin
picks the replica, hence the card. For replicated (time-sliced) devices it spreads: each
replica comes from the card with the fewest replicas allocated (``distributedAlloc`` in
NVIDIA/k8s-device-plugin, internal/rm/allocate.go), ties going to the lowest index. Whole
GPUs take the lowest free card. ``packed`` models the opposite policy, to show what it would
change. Pure bookkeeping, fed with what the real scheduler decided.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction


@dataclass(frozen=True)
class Placement:
    card: str  # "node/index"
    share: Fraction  # of that card


@dataclass
class NodeCards:
    cards: int
    replicas: int  # per card; 1 for whole GPUs
    used: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.used:
            self.used = [0] * self.cards


class CardModel:
    """Cards per node and the replicas each pod holds, in the order pods were bound."""

    def __init__(self, nodes: dict[str, tuple[int, int]], *, packed: bool = False) -> None:
        """``nodes``: node name -> (cards, replicas per card). ``packed``: fill the fullest card that has
        room first instead of spreading (what a packing allocation policy would do)."""
        self.packed = packed
        self.nodes = {name: NodeCards(cards, replicas) for name, (cards, replicas) in nodes.items()}
        self.placements: dict[str, Placement] = {}
        self._index: dict[str, tuple[str, int]] = {}

    def all_cards(self) -> list[str]:
        return [f"{name}/{index}" for name, node in self.nodes.items() for index in range(node.cards)]

    def place(self, pod: str, node: str) -> Placement:
        """Give ``pod`` (bound to ``node``, holding one replica or one whole GPU) a card."""
        if pod in self.placements:
            return self.placements[pod]
        cards = self.nodes[node]
        free = [i for i in range(cards.cards) if cards.used[i] < cards.replicas]
        if not free:
            raise ValueError(f"node {node} has no free replica for {pod}: the scheduler and the model disagree")
        index = min(free, key=lambda i: (-cards.used[i] if self.packed else cards.used[i], i))
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
