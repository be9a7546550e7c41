"""``FractionalSpawner``'s borrowing traits (docs/lending.md, "Borrowing a training card")."""

from __future__ import annotations

from typing import Any

from traitlets import Dict, HasTraits, List, TraitError, validate

from fracnb_spawner.borrowing.decide import BorrowSettings, check_selector, check_tolerations


class BorrowingTraits(HasTraits):
    """Mixed into ``FractionalSpawner``."""

    borrowable_node_selector = Dict(
        {},
        help="""The labels of nodes whose idle cards a notebook may borrow when its own pool is full, typically
        the training pool. A GPU start that would wait in the GPU queue (its profile has ``queue.max_wait``)
        starts on such a node instead when one has room for its share now, counting batch pods' cards as taken:
        the pod's node selector is replaced by this one (the backend's own keys, such as the time-slicing
        replicas, are kept), it carries the label ``fracnb.io/borrowed: "true"``, and it keeps notebook
        priority. A start that queues all the same is created to start on either pool: when its turn comes it
        goes to its own pool if that has room, else to a borrowable card freed while it waited; with
        ``c.FracnbReclaim.enabled`` the fracnb service may evict batch pods on these nodes for it, under the
        reclaim rule, when its own pool's cannot make room (dra). A borrower is never stopped for training
        while it is in use; once it is idle while a batch pod waits for the pool, the fracnb service stops it
        after its idle timeout under demand, hibernating its kernels first. fracnb's own queue only
        (``c.FracnbQueue.engine = "builtin"``): under Kueue, borrowing between teams is Kueue's cohort borrowing.
        Empty: no borrowing.
        Default: {} (off). Example: ``c.FractionalSpawner.borrowable_node_selector = {"fracnb.io/pool": "training"}``
        """,
    ).tag(config=True)

    borrowable_tolerations = List(
        [],
        help="""Tolerations a borrowing notebook's pod gets, for the taints of the borrowable nodes, written as in
        a pod spec (``key``, ``operator``, ``value``, ``effect``, ``tolerationSeconds``). Only pods that borrow
        get them. Default: []. Example: ``c.FractionalSpawner.borrowable_tolerations = [{"key": "fracnb.io/pool",
        "operator": "Equal", "value": "training", "effect": "NoSchedule"}]``
        """,
    ).tag(config=True)

    @validate("borrowable_node_selector")
    def _check_borrowable_node_selector(self, proposal: dict) -> Any:
        try:
            return check_selector(proposal["value"])
        except ValueError as error:
            raise TraitError(f"FractionalSpawner.borrowable_node_selector: {error}") from None

    @validate("borrowable_tolerations")
    def _check_borrowable_tolerations(self, proposal: dict) -> Any:
        try:
            return check_tolerations(proposal["value"])
        except ValueError as error:
            raise TraitError(f"FractionalSpawner.borrowable_tolerations: {error}") from None

    def borrow_settings(self) -> BorrowSettings:
        """The borrowable pool, from these traits."""
        return BorrowSettings(dict(self.borrowable_node_selector), tuple(self.borrowable_tolerations))
