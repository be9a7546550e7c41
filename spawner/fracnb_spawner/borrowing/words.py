"""What the spawn form, the progress page and the dry run say of a borrowed card."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# The progress page's headline of a start sent to a borrowable node because its own pool is full.
STARTING_BORROWED = "Starting on a training card: development cards are full"
# The spawn form's line under a choice whose start would borrow now.
FORM_BORROWS = "development cards are full: it would start on a training card now"


def borrowing_summary(
    selector: Mapping[str, str], tolerations: Sequence[Mapping[str, Any]], engine: str, reclaim: bool = False
) -> str:
    """The dry run's line on borrowing (``c.FractionalSpawner.borrowable_node_selector``); ``reclaim``:
    ``c.FracnbReclaim.enabled``."""
    if not selector:
        return "  off (FractionalSpawner.borrowable_node_selector is empty): a start waits for its own pool"
    if engine != "builtin":
        return (
            f"  not with c.FracnbQueue.engine = {engine!r} (the hub refuses it): under Kueue, borrowing "
            "between teams is Kueue's cohort borrowing"
        )
    nodes = ", ".join(f"{key}={value}" for key, value in sorted(selector.items()))
    taints = f", with {len(tolerations)} toleration(s)" if tolerations else ""
    taking = (
        "with FracnbReclaim on, batch pods there are evicted for a waiting start under its rule when its own"
        " pool has no room to make (dra)"
        if reclaim
        else "batch pods there keep their cards (FracnbReclaim is off)"
    )
    return (
        f"  a queued GPU start whose own pool is full starts on a free card of nodes {nodes}{taints},"
        " never preempting there, at once or when its turn comes; idle borrowers get their timeout under demand"
        f" while training waits; {taking}"
    )
