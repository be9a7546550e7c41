"""The Kueue engine (``c.FracnbQueue.engine = "kueue"``): every GPU spawn gets a :class:`.place.KueuePlace`, and
the spawn form's queue line comes from the user's team quota in Kueue."""

from __future__ import annotations

from datetime import timedelta
from fractions import Fraction
from typing import Any

from fracnb_spawner.cluster.slots import Ask
from fracnb_spawner.gpu.plan import CPU_ONLY
from fracnb_spawner.queue.coordinator import QueueCoordinator
from fracnb_spawner.queue.engine import Spawn
from fracnb_spawner.queue.kueue.place import FormQuotaReads, KueuePlace, holders_release, read_team_quota
from fracnb_spawner.queue.kueue.quota import TeamQuota


class KueueEngine:
    """Kueue admits the GPU pods; fracnb's coordinator only watches them."""

    name = "kueue"
    counts_resource_requests = True
    preempts = True
    kueue_objects = True

    def place(self, spawn: Spawn, coordinator: QueueCoordinator) -> KueuePlace | None:
        # Every GPU pod goes through Kueue, queued or not: a pod without its LocalQueue would not count against the
        # team's quota.
        return None if spawn.plan is None or spawn.plan is CPU_ONLY else KueuePlace(spawn)

    async def form_text(
        self, spawn: Spawn, coordinator: QueueCoordinator, ask: Ask, max_wait: float, fraction: Fraction
    ) -> str | None:
        """From the user's team quota in Kueue (:mod:`.quota`), read once per view of the form."""
        if spawn.form_quota is None:
            spawn.form_quota = FormQuotaReads(lambda: read_team_quota(spawn.host), spawn.clock)

        def wait_minutes(quota: TeamQuota) -> float | None:
            now = spawn.clock.now()
            gives_up_at = now + timedelta(seconds=max_wait)
            release = holders_release(
                spawn, quota.holder_queues, ask.kind, quota.pending + 1, gives_up_at, joining=True
            )
            return (release.at - now).total_seconds() / 60 if release else None

        return await spawn.form_quota.form_text(fraction, wait_minutes)

    def local_queue_template(self, settings: Any) -> str | None:
        return settings.kueue_local_queue
