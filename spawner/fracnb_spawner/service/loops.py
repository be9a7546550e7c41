"""Everything the fracnb service runs in the background: culling passes, resuming forgotten queued spawns,
storing the session reports kept while the database was away, purging old records, reclaiming GPUs for
waiting spawns, and sweeping ResourceClaims left without owner. Each runs forever, logs a failed round and
tries again; the intervals come from ``c.FracnbService`` and ``c.FracnbReclaim`` (service/app.py). The passes
themselves are beside: cullpass.py, resume.py, reclaiming.py, claimsweep.py."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from prometheus_client import CollectorRegistry

from fracnb_spawner.history.stopnotices import purge_stops
from fracnb_spawner.history.store import purge
from fracnb_spawner.reclaim.config import FracnbReclaim
from fracnb_spawner.service.choices import HubChoices
from fracnb_spawner.service.claimsweep import sweep_claims
from fracnb_spawner.service.cullpass import PassReport
from fracnb_spawner.service.reclaiming import (
    KubeReclaimApi,
    Reclaimer,
    ReclaimMetrics,
    remember_recent_evictions,
    want_from_choices,
)
from fracnb_spawner.service.sessionstore import store_and_count
from fracnb_spawner.service.state import ServiceState

log = logging.getLogger("fracnb.service")
reclaim_log = logging.getLogger("fracnb.reclaim")

KEPT_REPORTS_RETRY_SECONDS = 5.0  # how often reports kept while the session database was away are stored
PURGE_EVERY_SECONDS = 3600.0


async def cull_forever(state: ServiceState, every: float) -> None:
    while True:
        try:
            report = await state.cull_pass()
            log.log(logging.INFO if report.culled or report.failed else logging.DEBUG, "%s", pass_summary(report))
        except Exception:
            log.exception("Culling pass failed; trying again in %ss", every)
        await asyncio.sleep(every)


def pass_summary(report: PassReport) -> str:
    """ "Culling pass: 3 servers, 1 warned of its coming stop (the default server of 'ann'), 1 culled in 0.02s"."""
    warned = f"{report.warned} warned"
    if report.warned_servers:
        warned += f" of {'its' if report.warned == 1 else 'their'} coming stop ({', '.join(report.warned_servers)})"
    return f"Culling pass: {report.servers} servers, {warned}, {len(report.culled)} culled in {report.duration:.2f}s"


async def resume_forever(state: ServiceState, every: float) -> None:
    while every > 0:
        try:
            report = await state.resume_pass()
            if report.resumed or report.deferred or report.failed:
                log.info(
                    "Queued spawns a restarted hub forgot: %d resumed, %d to try again, %d failed",
                    len(report.resumed),
                    len(report.deferred),
                    report.failed,
                )
        except Exception:
            log.exception("Looking for queued spawns to resume failed; trying again in %ss", every)
        await asyncio.sleep(every)


async def store_kept_reports_forever(state: ServiceState) -> None:
    """Store the session reports and stop notices kept while the database was away or not open yet, once it
    answers (:mod:`.keptreports`, :meth:`ServiceState.write_stop`)."""
    while True:
        await asyncio.sleep(KEPT_REPORTS_RETRY_SECONDS)
        written = await state.write_unwritten_stops()
        if written:
            log.info("Wrote %d stop notices kept while the database was away", written)
        if not state.pending_reports or state.history is None:
            continue
        stored = await state.pending_reports.flush(lambda user, report: store_and_count(state, user, report))
        if stored:
            log.info("Stored %d session reports kept while the database was away", stored)


async def purge_forever(state: ServiceState, keep_days: float) -> None:
    """Delete session records and stops older than ``keep_days`` (0: keep them forever), every hour."""
    while keep_days > 0:
        try:
            gone = await asyncio.to_thread(
                purge, state.history, now=state.clock().replace(tzinfo=None), keep_days=keep_days
            )
            await asyncio.to_thread(purge_stops, state.history, now=state.clock(), keep_days=keep_days)
            if gone:
                log.info("Deleted %d session records older than %s days", gone, keep_days)
        except Exception:
            state.history_metrics.database_errors.labels(operation="purge").inc()
            log.exception("Deleting old session records failed; trying again in an hour")
        await asyncio.sleep(PURGE_EVERY_SECONDS)


async def reclaim_forever(reclaimer: Reclaimer, every: float) -> None:
    await remember_recent_evictions(reclaimer)
    while True:
        try:
            await reclaimer.reclaim_pass()
        except Exception:
            reclaim_log.exception("Reclaim pass failed; trying again in %ss", every)
        await asyncio.sleep(every)


async def start_reclaiming(settings: FracnbReclaim, pods: Any, choices: HubChoices, registry: CollectorRegistry) -> Any:
    """The reclaim loop as a task, when ``c.FracnbReclaim.enabled``; None otherwise."""
    if not settings.enabled:
        return None
    api = KubeReclaimApi(await pods.api_client())
    reclaimer = Reclaimer(
        api, settings.policy(), settings.evictions_per_minute, want_from_choices(choices), ReclaimMetrics(registry)
    )
    reclaim_log.info("Reclaim on: %s", " ".join(settings.summary()).strip())
    return asyncio.ensure_future(reclaim_forever(reclaimer, settings.every))


async def sweep_claims_forever(client: Any, namespace: str | None, every: float, grace: float, clock: Any) -> None:
    """A sweep every ``every`` seconds (0: never); ``client()`` gives the kubernetes_asyncio ApiClient."""
    while every > 0:
        try:
            report = await sweep_claims(await client(), namespace, clock(), grace)
            if report.adopted or report.deleted:
                log.info(
                    "ResourceClaims left without owner by a hub: %d given their pod, %d deleted (their pod is gone)",
                    len(report.adopted),
                    len(report.deleted),
                )
        except Exception as error:
            log.warning("Sweeping ResourceClaims left without owner failed (trying again in %ss): %r", every, error)
        await asyncio.sleep(every)
