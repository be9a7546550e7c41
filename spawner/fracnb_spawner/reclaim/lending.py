"""Which GPU backends can lend what notebooks do not hold to lower-priority batch work, and who takes it
back. Pure words, for the dry run and docs/lending.md.

Lending needs a batch pod to be able to ask for the same cards the notebooks share, and a way back:
kube-scheduler preempts lower-priority pods that hold an extended resource; for a DRA claim it does
not (1.36: "Preemption is not helpful for scheduling"), and the fracnb service evicts instead
(``c.FracnbReclaim``). A card the device plugin advertises only as time-slices, MPS shares or MIG
devices cannot be asked for whole.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lending:
    shares: bool  # a batch pod may borrow the same shares the notebooks use
    taken_back_by: str  # who frees them for a waiting notebook
    not_whole: str = ""  # why a batch pod cannot ask for a whole card among the notebooks' shares; "": it can

    def text(self) -> str:
        if not self.shares and self.not_whole:
            return f"cannot lend: {self.not_whole}"
        if self.not_whole:
            return f"cannot lend a whole card ({self.not_whole}); lends its shares, taken back by {self.taken_back_by}"
        what = "whole cards and shares" if self.shares else "whole cards"
        return f"lends {what}, taken back by {self.taken_back_by}"


PREEMPTION = "kube-scheduler's preemption (a PriorityClass below the notebooks')"
LENDING: dict[str, Lending] = {
    "time-slicing": Lending(True, PREEMPTION, "a time-sliced card cannot be requested whole"),
    "mps": Lending(True, PREEMPTION, "an MPS-shared card cannot be requested whole"),
    "mig": Lending(True, PREEMPTION, "the device plugin offers the MIG devices of the node's layout, not the card"),
    "hami": Lending(True, PREEMPTION + ", as far as HAMi's scheduler extender agrees (not tested by fracnb)"),
    "kai": Lending(True, "KAI's own queues and reclaim (fracnb neither counts nor evicts for them)"),
    "dra": Lending(True, "the fracnb service's evictions (FracnbReclaim; kube-scheduler does not preempt claims)"),
    "whole": Lending(False, PREEMPTION),
}


def lending_of(backend: str) -> Lending:
    """How ``backend``'s cards can be lent; a backend without GPUs lends nothing."""
    return LENDING.get(backend, Lending(False, "", "no GPU"))
