"""``c.FracnbReclaim``: which lower-priority pods the fracnb service may evict for a waiting notebook."""

from __future__ import annotations

from traitlets import Bool, Float, Integer, List, TraitError, Unicode, validate
from traitlets.config import Configurable

from fracnb_spawner.reclaim.victims import Policy


class FracnbReclaim(Configurable):
    """Takes back, by eviction, DRA devices that batch pods below the notebooks' priority hold while a
    notebook waits in the GPU queue for them (docs/lending.md)."""

    enabled = Bool(
        False,
        help="""
        Evict lower-priority pods whose DRA claims hold what a queued notebook needs. Off by
        default: evicting other teams' work is an admin's decision, and it needs RBAC beyond
        reading the hub's pods (list on nodes and on pods in every namespace, create on
        pods/eviction and events, list on events, PodDisruptionBudgets, ResourceSlices and
        ResourceClaims: helm-values/rbac.yaml). Extended resources need none of this:
        kube-scheduler preempts for them itself. Default: False.

        Example: c.FracnbReclaim.enabled = True
        """,
    ).tag(config=True)

    priority_below = Integer(
        0,
        help="""
        Only pods whose spec.priority (their PriorityClass's value) is below this, and below
        the waiting notebook's own, are evicted. Notebooks run at priority 0, so the default
        takes any pod of a negative PriorityClass; -1000 would spare everything above it.
        Notebooks are never evicted, whatever their priority. Default: 0.

        Example: c.FracnbReclaim.priority_below = -100
        """,
    ).tag(config=True)

    namespaces = List(
        Unicode(),
        help="""
        Namespaces whose pods may be evicted; empty: every namespace (the priority bound alone
        decides). Default: [].

        Example: c.FracnbReclaim.namespaces = ["batch", "training"]
        """,
    ).tag(config=True)

    evictions_per_minute = Integer(
        10,
        help="""
        The most evictions in any 60 s. A notebook that needs more waits for the next minute's.
        A restarted service counts the evictions of the minute before it from the Reclaimed
        events it wrote (list on events: helm-values/rbac.yaml; without it, its first minute
        counts as spent). Default: 10.

        Example: c.FracnbReclaim.evictions_per_minute = 5
        """,
    ).tag(config=True)

    every = Float(
        5,
        help="""
        Seconds between reclaim passes while it is enabled: how long a notebook that lower-priority
        pods block waits before they are asked to leave, while the per-minute limit and their
        PodDisruptionBudgets allow it (then their own grace period runs). Each pass lists nodes,
        and pods, ResourceSlices, ResourceClaims and PodDisruptionBudgets of every namespace,
        once. Default: 5.

        Example: c.FracnbReclaim.every = 5
        """,
    ).tag(config=True)

    @validate("evictions_per_minute")
    def _at_least_one(self, proposal: dict) -> int:
        if proposal["value"] < 1:
            raise TraitError(
                f"FracnbReclaim.evictions_per_minute: {proposal['value']} allows no eviction; "
                "use 1 or more, or FracnbReclaim.enabled = False"
            )
        return proposal["value"]

    @validate("every")
    def _positive(self, proposal: dict) -> float:
        if not proposal["value"] > 0:
            raise TraitError(f"FracnbReclaim.every: {proposal['value']} s is not a time between passes; use e.g. 5")
        return proposal["value"]

    def policy(self) -> Policy:
        return Policy(self.priority_below, frozenset(self.namespaces))

    def summary(self) -> list[str]:
        """The reclaim policy in words, for the dry run."""
        if not self.enabled:
            return ["  off (FracnbReclaim.enabled = False): a notebook waits for DRA devices that batch pods hold"]
        where = ", ".join(self.namespaces) if self.namespaces else "any namespace"
        return [
            f"  evicts pods of priority below {self.priority_below} (and the notebook's) in {where}, never a notebook,"
            f" for a queued notebook whose DRA claim they block; at most {self.evictions_per_minute} a minute,"
            f" a look every {self.every:g} s; PodDisruptionBudgets and grace periods honoured",
        ]
