"""What the service's web page shows, computed from plain values (no I/O).

A user sees their own servers (share, GPU memory budget, idle deadline), their quota and
their groups' use. An admin also sees every GPU kind of the cluster (allocatable, allocated,
free), the use per group and per user, the servers in warning and the recent culls. The
handler in :mod:`.handlers` gathers the inputs and renders ``templates/page.html``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any

from fracnb_spawner.cluster.nodes import requested_by_node
from fracnb_spawner.common.clock import clock_text, countdown_text
from fracnb_spawner.common.podkeys import GPU_MEMORY_ANNOTATION
from fracnb_spawner.common.units import format_bytes
from fracnb_spawner.culling import Action, CullDecision, CullPolicy
from fracnb_spawner.queue.demand import QueueEntry
from fracnb_spawner.quota.policy import Allocation, QuotaPolicy, gpus_text, share_text, share_words, used_by

PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True)
class ServerRow:
    user: str
    server: str  # "" is the default server
    profile: str
    share: Fraction
    budget_bytes: int | None
    idle_timeout: float
    cull_at: datetime | None
    seconds_left: float | None
    reason: str | None
    warning: bool

    @property
    def name(self) -> str:
        return self.server or "(default)"

    @property
    def share_text(self) -> str:
        return share_words(self.share)

    @property
    def budget_text(self) -> str:
        return format_bytes(self.budget_bytes) if self.budget_bytes else "—"

    @property
    def deadline_text(self) -> str:
        if self.cull_at is None or self.seconds_left is None:
            return "never stopped for idleness" if not self.idle_timeout else "not started yet"
        why = {"max-age": "max age", "demand": "idle while someone waits for a GPU"}.get(self.reason or "", "idle")
        return f"in {countdown_text(max(self.seconds_left, 0))} ({why}, at {clock_text(self.cull_at)})"


def waiting_text(queued_at: datetime | None, now: datetime) -> str:
    """ "25 min (since 13:40 UTC)" for a spawn waiting in the queue; "—" when its queue time is unknown."""
    if queued_at is None:
        return "—"
    seconds = max((now - queued_at).total_seconds(), 0.0)
    waited = countdown_text(seconds) if seconds >= 60 else f"{round(seconds)} s"
    return f"{waited} (since {clock_text(queued_at)})"


@dataclass(frozen=True)
class UseRow:
    """GPUs held by a user or a group, against its quota (``None``: no limit)."""

    name: str
    used: Fraction
    limit: Fraction | None
    servers: int = 0

    @property
    def used_text(self) -> str:
        return share_text(self.used)

    @property
    def limit_text(self) -> str:
        return share_text(self.limit)

    @property
    def over(self) -> bool:
        return self.limit is not None and self.used > self.limit


@dataclass(frozen=True)
class GpuKind:
    """One extended GPU resource on nodes of one product: units allocatable, allocated, free."""

    resource: str
    product: str
    nodes: int
    allocatable: int
    allocated: int

    @property
    def free(self) -> int:
        return max(self.allocatable - self.allocated, 0)


@dataclass(frozen=True)
class CullRecord:
    when: datetime
    user: str
    server: str
    reason: str

    @property
    def name(self) -> str:
        return self.server or "(default)"


@dataclass
class UserView:
    user: str
    servers: list[ServerRow]
    mine: UseRow
    groups: list[UseRow]
    available: Fraction | None
    named_servers: bool = True  # JupyterHub.allow_named_servers: may the user run more than one server?

    @property
    def holding_text(self) -> str:
        """ "You hold 0.25 GPU of your quota of 1 GPU.", or without a quota of the user's own, what they hold."""
        if self.mine.limit is None:
            return f"You hold {self.mine.used_text}; you have no quota of your own."
        return f"You hold {self.mine.used_text} of your quota of {self.mine.limit_text}."

    @property
    def headroom_text(self) -> str:
        """What the quotas leave for a server started now, for one user who may run one server or several."""
        if self.available is None:
            return "No quota limits what you can start."
        if not self.named_servers and self.servers:
            # One server at a time: a new one starts in place of the running one, whose share comes back.
            room = self._room_once_freed(self.mine.used)
            if room == 0:
                return "You can run one server at a time; your quotas leave no GPU for a new one now."
            return f"You can run one server at a time; once yours stops, a new one could take up to {gpus_text(room)}."
        which = "one more server" if self.servers else "a server"
        if self.available == 0:
            return f"Your quotas leave no GPU for {which} now."
        return f"{which[0].upper()}{which[1:]} could take up to {gpus_text(self.available)}."

    def _room_once_freed(self, freed: Fraction) -> Fraction:
        """What every limit of the user would leave once ``freed`` GPUs of theirs are given back."""
        rooms = [row.limit - row.used + freed for row in (self.mine, *self.groups) if row.limit is not None]
        return max(min(rooms), Fraction(0))


@dataclass
class AdminView:
    kinds: list[GpuKind] | None  # None: the nodes could not be read
    kinds_error: str
    groups: list[UseRow]
    users: list[UseRow]
    warnings: list[ServerRow]
    culls: list[CullRecord]
    totals: dict[str, Fraction] = field(default_factory=dict)
    queue: list[QueueEntry] = field(default_factory=list)  # waiting spawns, in demand.queue_entries' order


def _pod_budget(annotations: Mapping[str, str]) -> int | None:
    raw = annotations.get(GPU_MEMORY_ANNOTATION, "")
    return int(raw) if raw.isdigit() else None


def server_rows(
    users: Iterable[Mapping[str, Any]],
    pods: Mapping[tuple[str, str], Any],
    judge: Callable[[Mapping[str, Any], Any], tuple[CullPolicy, CullDecision]],
) -> list[ServerRow]:
    """A row per server of the user models; ``pods`` is :func:`.core.index_pods`'s index, and
    ``judge`` (a :class:`.core.Judge`) decides a server from its model and pod."""
    rows = []
    for user in users:
        for server, model in sorted((user.get("servers") or {}).items()):
            pod = pods.get((user["name"], server))
            policy, decision = judge(model, pod)
            rows.append(
                ServerRow(
                    user=user["name"],
                    server=server,
                    profile=pod.profile if pod else (model.get("user_options") or {}).get("profile", ""),
                    share=pod.fraction if pod else Fraction(0),
                    budget_bytes=_pod_budget(pod.annotations) if pod else None,
                    idle_timeout=policy.idle_timeout,
                    cull_at=decision.cull_at,
                    seconds_left=decision.seconds_left,
                    reason=decision.reason.value if decision.reason else None,
                    warning=decision.action is not Action.KEEP,
                )
            )
    return rows


def user_view(
    user: str,
    rows: list[ServerRow],
    allocations: list[Allocation],
    policy: QuotaPolicy,
    groups: Mapping[str, Iterable[str]],
    *,
    named_servers: bool = True,
) -> UserView:
    """The user's part of the page; ``groups`` maps each of their groups to its members."""
    used = used_by(allocations, [user])
    limit = policy.user_limit(user)
    group_rows = [
        UseRow(name, used_by(allocations, members), policy.groups.get(name)) for name, members in sorted(groups.items())
    ]
    headrooms = [r.limit - r.used for r in [UseRow(user, used, limit), *group_rows] if r.limit is not None]
    available = max(min(headrooms), Fraction(0)) if headrooms else None
    return UserView(user, rows, UseRow(user, used, limit, len(rows)), group_rows, available, named_servers)


def gpu_kinds(
    nodes: Iterable[Mapping[str, Any]], pods: list[Mapping[str, Any]], is_gpu: Callable[[str], bool]
) -> list[GpuKind]:
    """Every GPU resource the nodes offer, per product, with what live pods bound there request."""
    totals: dict[tuple[str, str], list[int]] = {}
    used_cache: dict[str, dict[str, int]] = {}
    for node in nodes:
        metadata = node.get("metadata") or {}
        if (node.get("spec") or {}).get("unschedulable"):
            continue
        product = (metadata.get("labels") or {}).get(PRODUCT_LABEL, "unknown product")
        for resource, amount in ((node.get("status") or {}).get("allocatable") or {}).items():
            if not is_gpu(resource):
                continue
            try:
                units = int(str(amount))
            except ValueError:
                continue
            if units <= 0:
                continue
            if resource not in used_cache:
                used_cache[resource] = requested_by_node(pods, resource)
            entry = totals.setdefault((resource, product), [0, 0, 0])
            entry[0] += 1
            entry[1] += units
            entry[2] += used_cache[resource].get(metadata.get("name", ""), 0)
    return [
        GpuKind(resource, product, n, total, used) for (resource, product), (n, total, used) in sorted(totals.items())
    ]


def use_rows(
    allocations: list[Allocation],
    policy: QuotaPolicy,
    group_members: Mapping[str, Iterable[str]],
) -> tuple[list[UseRow], list[UseRow]]:
    """Use per group (every group with a quota or a member holding GPUs) and per user holding GPUs."""
    holders = sorted({a.user for a in allocations if a.fraction > 0})
    users = [
        UseRow(
            name, used_by(allocations, [name]), policy.user_limit(name), sum(1 for a in allocations if a.user == name)
        )
        for name in holders
    ]
    names = sorted(set(policy.groups) | set(group_members))
    groups = [
        UseRow(name, used_by(allocations, group_members.get(name, ())), policy.groups.get(name)) for name in names
    ]
    return groups, users
