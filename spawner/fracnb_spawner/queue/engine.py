"""The seam between one spawner's queue (:class:`.spawning.SpawnQueue`) and the engine that admits its GPU pods.

An engine (``c.FracnbQueue.engine``) is chosen once per hub configuration (:func:`.engines.engine_of`) and gives
each spawn that queues a :class:`Place`: fracnb's own coordinator (:mod:`.builtin`) or Kueue (:mod:`.kueue.engine`).
``SpawnQueue`` talks to the place only through this protocol, so it never asks which engine runs.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from fractions import Fraction
from typing import Any, Protocol

from fracnb_spawner.borrowing.decide import Borrow
from fracnb_spawner.cluster.slots import Ask
from fracnb_spawner.culling import ServerActivity
from fracnb_spawner.gpu.plan import GPUPlan
from fracnb_spawner.queue.coordinator import QueueCoordinator
from fracnb_spawner.queue.releases import CullDefaults, Release

# A headline for the progress page and the times it says, in the hub's zone.
Status = tuple[str, list[datetime]]


class Spawn(Protocol):
    """What an engine reads of one spawner's current spawn (``SpawnQueue``)."""

    host: Any  # the spawner (:class:`.spawning.QueueHost`)
    clock: Any
    key: str  # "namespace/pod"
    ask: Ask | None
    borrow: Borrow | None  # where it may start if its own pool is full (fracnb's own queue only)
    plan: GPUPlan | None
    max_wait: float
    form_quota: Any  # an engine's reads for the spawn form, kept between its rows (None until the first)
    activity: Callable[[str | None, str], ServerActivity | None]
    cull_defaults: Callable[[], CullDefaults]

    def priority(self) -> int: ...
    def groups(self) -> dict[str, list[str]]: ...
    def releases(self, kind: str, now: datetime) -> list[Release]: ...
    def watched_pods(self) -> list[dict]: ...


class Place(Protocol):
    """One spawn's place in an engine's queue, from just before its pod is created until the spawn ends."""

    poll_seconds: float  # how often the start looks whether the place still waits
    borrowed: Ask | None  # the borrowable pool's ask its pod went to the scheduler with, if it borrowed a card

    async def join(self, pod: Any) -> bool:
        """Before the pod is created: mark it for the engine; whether it waits (False: it goes to the scheduler)."""
        ...

    def waiting(self, pod: dict | None) -> bool:
        """Whether the spawn still waits (``pod``: its pod as the hub's watch has it, None if not seen yet)."""
        ...

    def remaining(self) -> float:
        """Seconds left of the spawn's maximum wait."""
        ...

    def status(self) -> Status | None:
        """The progress page's headline while the spawn waits, with the times it says; None if it has none yet."""
        ...

    async def refresh(self, pod: dict | None) -> None:
        """Read what the status needs that the hub does not hold itself (Kueue's view of the pod)."""
        ...

    def pod_created(self) -> None:
        """The spawn's pod exists now."""
        ...

    def counts_the_spawn(self) -> bool:
        """Whether the queue counts this spawn itself, so that a gated pod of its server is this spawn's and not a
        place kept from before a hub restart."""
        ...

    async def take_over(self, wanted: Any) -> tuple[Any, str] | None:
        """When the spawn's pod already exists: that pod and its server's token, if the spawn resumes its place
        with it; None: replace the pod."""
        ...

    def leave(self, *, cancelled: bool, pod: dict | None) -> bool:
        """The spawn ended (started, failed or ``cancelled``): give up the place; whether the user left it while
        it waited."""
        ...


class Engine(Protocol):
    """Who admits the GPU pods: the places it gives, the spawn form's queue line, and what it asks of the
    configuration."""

    name: str  # ``c.FracnbQueue.engine``
    # Its quota counts the GPUs of a pod's resource requests (Kueue): choices whose GPUs are no countable request
    # are refused at start (``check_kueue_backends``).
    counts_resource_requests: bool
    # It may preempt a running server, which then saves its variables on SIGTERM in its grace period.
    preempts: bool
    # It keeps its queue in Kueue's objects (Workloads, LocalQueues, ClusterQueues): the fracnb service reads its
    # demand and the team quotas there.
    kueue_objects: bool

    def place(self, spawn: Spawn, coordinator: QueueCoordinator) -> Place | None:
        """The place of a spawn that is about to create its pod; None: this spawn does not queue."""
        ...

    async def form_text(
        self, spawn: Spawn, coordinator: QueueCoordinator, ask: Ask, max_wait: float, fraction: Fraction
    ) -> str | None:
        """The spawn form's queue line for a choice whose spawn would wait now, else None."""
        ...

    def local_queue_template(self, settings: Any) -> str | None:
        """The template of the users' LocalQueues (``FracnbQueue.kueue_local_queue``); None without Kueue."""
        ...
