"""What the service's web page shows, computed from plain values (no I/O).

A user sees their own servers (share, GPU memory budget, idle deadline), their quota and
their groups' use, and why a server of theirs was stopped lately. An admin also sees, per slot
kind the hub's choices use, the GPU shares its nodes offer, in use, waiting and free (:mod:`.choices`),
the use per group and per user, where each running GPU server was placed and why (its pod's
``fracnb.io/placement``), the servers in warning and the recent culls. Servers waiting in
the GPU queue are said to be waiting, not holding a GPU. With the kueue engine the team quotas are Kueue's
ClusterQueues (their quota, use and borrowing), and what a user may start is what Kueue would admit. The
handler in :mod:`.handlers` gathers the inputs and renders ``templates/page.html``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any
from zoneinfo import ZoneInfo

from markupsafe import Markup

from fracnb_spawner.common.clock import clock_text, countdown_text, duration_text
from fracnb_spawner.common.podkeys import GPU_MEMORY_ANNOTATION, PLACEMENT_ANNOTATION
from fracnb_spawner.common.timehtml import with_times
from fracnb_spawner.common.units import format_bytes, gpus_text, held_words, share_text, share_words
from fracnb_spawner.culling import Action, CullDecision, CullPolicy, parse_timestamp
from fracnb_spawner.history.stopnotices import StopNotice
from fracnb_spawner.queue.demand import QueueEntry
from fracnb_spawner.queue.kueue.quota import TeamQuota, admission_text, borrowing_note
from fracnb_spawner.quota.policy import Allocation, QuotaPolicy, used_by
from fracnb_spawner.service.choices import SlotKindUse
from fracnb_spawner.service.cullpass import saves_variables


@dataclass(frozen=True)
class ServerRow:
    user: str
    server: str  # "" is the default server
    profile: str  # as the spawn form names it (the display name; the slug for a profile the hub no longer has)
    share: Fraction
    budget_bytes: int | None
    idle_timeout: float
    cull_at: datetime | None
    seconds_left: float | None
    reason: str | None
    warning: bool
    waiting: bool = False  # its pod waits in the GPU queue
    zone: ZoneInfo | None = None  # of the times shown (the hub's display_timezone); None: UTC
    stopping: bool = False  # the hub is stopping it (its pod may already be gone)
    busy: bool = False  # its notebook's last report says a kernel runs a cell
    saves: bool = False  # its stop for ``reason`` hibernates first (a GPU server, hibernation on)
    placement: str = ""  # the card the hub chose for its share, and why (its pod's annotation); "": none chosen

    @property
    def name(self) -> str:
        return server_name(self.server)

    @property
    def share_text(self) -> str:
        if self.stopping:
            return "being freed"
        return share_words(self.share) + (" (waiting)" if self.waiting and self.share else "")

    @property
    def holds_gpu(self) -> bool:
        """A running server with a GPU share (not waiting in the queue, not being stopped)."""
        return self.share > 0 and not self.waiting and not self.stopping

    @property
    def placement_text(self) -> str:
        return self.placement or PLACED_BY_OTHERS

    @property
    def budget_text(self) -> str:
        return format_bytes(self.budget_bytes) if self.budget_bytes else "—"

    @property
    def deadline_html(self) -> Markup:
        """:attr:`deadline_text` with its time in the reader's zone (the page carries LOCAL_TIMES_SCRIPT)."""
        return with_times(self.deadline_text, [self.cull_at] if self.cull_at else [], self.zone)

    @property
    def deadline_text(self) -> str:
        if self.stopping:
            return "stopping now"
        if self.waiting:
            return "not started yet: waiting for a GPU"
        if self.busy and self.reason in ("idle", "demand") and not self.warning:
            # Each report of the running cell moves the deadline: a time would only keep moving.
            return f"not while a cell runs; {duration_text(self.idle_timeout)} after the last one ends"
        if self.cull_at is None or self.seconds_left is None:
            return "never stopped for idleness" if not self.idle_timeout else "not started yet"
        why = {
            "max-age": "max age",
            "demand": "idle while someone waits for a GPU",
            "gpu-unused": "GPU unused while idle",
            "gpu-unused-busy": "GPU unused while busy on the CPU",
        }.get(self.reason or "", "idle")
        text = f"in {countdown_text(max(self.seconds_left, 0))} ({why}, at {clock_text(self.cull_at, self.zone)})"
        return text + ("; its idle kernels' variables are saved first" if self.warning and self.saves else "")


# A GPU server without the hub's placement annotation: a backend where the device plugin or KAI picks the card,
# a policy with nothing to choose (one card fits), or a server started before placement existed.
PLACED_BY_OTHERS = "not chosen by the hub (the scheduler's or the device plugin's choice)"

STOP_REASONS = {
    "idle": "idle",
    "demand": "idle while someone waited for a GPU",
    "gpu-unused": "GPU unused while idle",
    "gpu-unused-busy": "GPU unused while busy on the CPU",
    "max-age": "maximum age",
}


def stop_reason_text(reason: str) -> str:
    return STOP_REASONS.get(reason, reason)


def server_name(server: str) -> str:
    """A server as the hub home lists it: its name, and "default server" for the one without a name."""
    return server or "default server"


def waiting_text(queued_at: datetime | None, now: datetime, zone: ZoneInfo | None = None) -> str:
    """ "25 min (since 13:40 UTC)" for a spawn waiting in the queue; "—" when its queue time is unknown."""
    if queued_at is None:
        return "—"
    seconds = max((now - queued_at).total_seconds(), 0.0)
    waited = countdown_text(seconds) if seconds >= 60 else f"{round(seconds)} s"
    return f"{waited} (since {clock_text(queued_at, zone)})"


def waiting_html(queued_at: datetime | None, now: datetime, zone: ZoneInfo | None = None) -> Markup:
    """:func:`waiting_text` with its time in the reader's zone (the page carries LOCAL_TIMES_SCRIPT)."""
    return with_times(waiting_text(queued_at, now, zone), [queued_at] if queued_at else [], zone)


@dataclass(frozen=True)
class UseRow:
    """GPUs held by a user or a group, against its quota (``None``: no limit); ``waiting``: the part of
    ``used`` that servers waiting in the GPU queue reserve (it counts against the quota, on no GPU yet)."""

    name: str
    used: Fraction
    limit: Fraction | None
    servers: int = 0
    waiting: Fraction = Fraction(0)
    no_limit_text: str = "no limit"  # its quota when fracnb has none (with Kueue, the team quota is elsewhere)

    @property
    def used_text(self) -> str:
        return held_words(self.used, self.waiting)

    @property
    def limit_text(self) -> str:
        return self.no_limit_text if self.limit is None else share_text(self.limit)

    @property
    def over(self) -> bool:
        return self.limit is not None and self.used > self.limit


@dataclass
class UserView:
    user: str
    servers: list[ServerRow]
    mine: UseRow
    groups: list[UseRow]
    available: Fraction | None
    named_servers: bool = True  # JupyterHub.allow_named_servers: may the user run more than one server?
    # The user's servers' last stops by the service, newest first, of the servers not started since.
    stops: list[StopNotice] = field(default_factory=list)
    zone: ZoneInfo | None = None
    kueue: bool = False  # the kueue engine: Kueue admits GPU servers on the team quota in ``team``
    team: TeamQuota | None = None  # the user's team quota in Kueue; None: not read, or no LocalQueue of theirs

    @property
    def teams(self) -> list[TeamQuota]:
        return [self.team] if self.team is not None else []

    @property
    def borrowing_text(self) -> str | None:
        """With Kueue, while the user runs a GPU server and their team borrows quota: that Kueue can preempt it."""
        if not self.kueue or not any(row.share > 0 and not row.waiting for row in self.servers):
            return None
        return borrowing_note(self.team)

    @property
    def holding_text(self) -> str:
        """ "You hold 0.25 GPU of your quota of 1 GPU.", or without a quota of the user's own, what they hold."""
        if self.mine.limit is None:
            return f"You hold {self.mine.used_text}; you have no quota of your own."
        return f"You hold {self.mine.used_text} of your quota of {self.mine.limit_text}."

    @property
    def headroom_text(self) -> str:
        """What the quotas leave for a server started now, for one user who may run one server or several; with
        Kueue, what Kueue would admit too."""
        if not self.kueue:
            return self._fracnb_headroom_text()
        fracnb = self._fracnb_headroom_text() if self.available is not None else ""
        return " ".join(filter(None, [fracnb, admission_text(self.team)]))

    def _fracnb_headroom_text(self) -> str:
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
    kinds: list[SlotKindUse] | None  # per slot kind of the hub's choices; None: the nodes could not be read
    kinds_error: str
    groups: list[UseRow]
    users: list[UseRow]
    warnings: list[ServerRow]
    culls: list[StopNotice]  # the service's stops since it started, newest first
    totals: dict[str, Fraction] = field(default_factory=dict)
    queue: list[QueueEntry] = field(default_factory=list)  # waiting spawns, in demand.queue_entries' order
    kueue: bool = False  # the kueue engine: team quotas are Kueue's ClusterQueues (``teams``)
    teams: list[TeamQuota] | None = None  # with kueue: every ClusterQueue's GPU quota; None: not read
    placed: list[ServerRow] = field(default_factory=list)  # running GPU servers, with where the hub placed each


def _pod_budget(annotations: Mapping[str, str]) -> int | None:
    raw = annotations.get(GPU_MEMORY_ANNOTATION, "")
    return int(raw) if raw.isdigit() else None


def server_rows(
    users: Iterable[Mapping[str, Any]],
    pods: Mapping[tuple[str, str], Any],
    judge: Callable[[Mapping[str, Any], Any, tuple[str, str]], tuple[CullPolicy, CullDecision]],
    profile_name: Callable[[str], str] = str,
    zone: ZoneInfo | None = None,
    *,
    busy: Callable[[tuple[str, str]], bool] = lambda _: False,
    saves: Callable[[str], bool] = lambda _: False,
) -> list[ServerRow]:
    """A row per server of the user models; ``pods`` is :func:`.core.index_pods`'s index, ``judge``
    (a :class:`.core.Judge`) decides a server from its model and pod, ``profile_name`` names a profile's slug,
    ``busy`` says whether a server's notebook reported a running cell lately, ``saves`` whether a GPU server's
    stop for a reason hibernates first."""
    rows = []
    for user in users:
        for server, model in sorted((user.get("servers") or {}).items()):
            pod = pods.get((user["name"], server))
            policy, decision = judge(model, pod, (user["name"], server))
            rows.append(
                ServerRow(
                    user=user["name"],
                    server=server,
                    profile=profile_name(pod.profile if pod else (model.get("user_options") or {}).get("profile", "")),
                    share=pod.fraction if pod else Fraction(0),
                    budget_bytes=_pod_budget(pod.annotations) if pod else None,
                    idle_timeout=policy.idle_timeout,
                    cull_at=decision.cull_at,
                    seconds_left=decision.seconds_left,
                    reason=decision.reason.value if decision.reason else None,
                    warning=decision.action is not Action.KEEP,
                    waiting=bool(pod and pod.queued),
                    zone=zone,
                    stopping=model.get("pending") == "stop",
                    busy=busy((user["name"], server)),
                    saves=saves_variables(pod, decision, saves),
                    placement=pod.annotations.get(PLACEMENT_ANNOTATION, "") if pod else "",
                )
            )
    return rows


def started_since(user: Mapping[str, Any], stopped: StopNotice) -> bool:
    """Whether the user's server that was stopped has been started again since (its notice is old news)."""
    model = (user.get("servers") or {}).get(stopped.server)
    if model is None:
        return False
    started = parse_timestamp(model.get("started"))
    return started is None or started.replace(tzinfo=None) >= stopped.stopped_at


def user_view(
    user: str,
    rows: list[ServerRow],
    allocations: list[Allocation],
    policy: QuotaPolicy,
    groups: Mapping[str, Iterable[str]],
    *,
    named_servers: bool = True,
    kueue: bool = False,
    team: TeamQuota | None = None,
) -> UserView:
    """The user's part of the page; ``groups`` maps each of their groups to its members. With ``kueue`` (the
    engine), ``team`` is the user's team quota in Kueue, and a group without a quota of fracnb's is left out:
    Kueue's team quota is what limits it."""
    used = used_by(allocations, [user])
    limit = policy.user_limit(user)
    group_rows = [
        _use_row(name, allocations, members, policy.groups.get(name))
        for name, members in sorted(groups.items())
        if not kueue or name in policy.groups
    ]
    headrooms = [r.limit - r.used for r in [UseRow(user, used, limit), *group_rows] if r.limit is not None]
    available = max(min(headrooms), Fraction(0)) if headrooms else None
    mine = _use_row(user, allocations, [user], limit, servers=len(rows))
    return UserView(user, rows, mine, group_rows, available, named_servers, kueue=kueue, team=team)


def _use_row(
    name: str,
    allocations: list[Allocation],
    members: Iterable[str],
    limit: Fraction | None,
    *,
    servers: int = 0,
    no_limit_text: str = "no limit",
) -> UseRow:
    members = list(members)
    waiting = used_by(allocations, members, waiting_only=True)
    return UseRow(name, used_by(allocations, members), limit, servers, waiting, no_limit_text)


KUEUE_GROUP_QUOTA = "none here; Kueue's team quotas apply"  # a group without a quota of fracnb's, with Kueue


def use_rows(
    allocations: list[Allocation],
    policy: QuotaPolicy,
    group_members: Mapping[str, Iterable[str]],
    *,
    kueue: bool = False,
) -> tuple[list[UseRow], list[UseRow]]:
    """Use per group (every group with a quota or a member holding GPUs) and per user holding GPUs; with
    ``kueue`` (the engine) a group without a quota of fracnb's does not read "no limit": Kueue's team quotas
    limit it."""
    holders = sorted({a.user for a in allocations if a.fraction > 0})
    users = [
        _use_row(name, allocations, [name], policy.user_limit(name), servers=sum(a.user == name for a in allocations))
        for name in holders
    ]
    names = sorted(set(policy.groups) | set(group_members))
    no_limit = KUEUE_GROUP_QUOTA if kueue else "no limit"
    groups = [
        _use_row(name, allocations, group_members.get(name, ()), policy.groups.get(name), no_limit_text=no_limit)
        for name in names
    ]
    return groups, users
