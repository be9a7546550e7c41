"""``ServiceState``: what the fracnb service's handlers and its background loops share."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from jupyterhub.services.auth import HubAuth

from fracnb_spawner.common.logsafe import server_shown
from fracnb_spawner.hibernation.client import Hibernation
from fracnb_spawner.hibernation.culled import Hibernator, hibernation_json
from fracnb_spawner.history.metrics import HistoryMetrics
from fracnb_spawner.history.stopnotices import StopNotice, latest_stops, naive_utc, record_stop
from fracnb_spawner.history.stopnotices import recent_culls as recent_culls_of
from fracnb_spawner.queue.kueue.quota import borrowing_note
from fracnb_spawner.quota.config import FracnbQuotas
from fracnb_spawner.service import cullpass
from fracnb_spawner.service.advicemenu import Menu
from fracnb_spawner.service.busymarks import BusyMarks
from fracnb_spawner.service.choices import HubChoices
from fracnb_spawner.service.gpuunits import gpu_kinds
from fracnb_spawner.service.hubapi import HubAPI
from fracnb_spawner.service.keptreports import PendingReports
from fracnb_spawner.service.keptstops import save_kept_stops
from fracnb_spawner.service.kueuestopnotice import kueue_stop_notice, server_pod
from fracnb_spawner.service.meterfacts import MeterFacts
from fracnb_spawner.service.metrics import CullMetrics
from fracnb_spawner.service.pods import PodSource, team_of
from fracnb_spawner.service.resume import ResumeReport, resume_pass
from fracnb_spawner.service.stoppedservers import stopped_servers

log = logging.getLogger("fracnb.service")

RECENT_CULLS = 50  # how many of the latest culls the admin page lists


class ServiceState:
    """What the handlers and the culling loop share."""

    def __init__(
        self,
        *,
        hub: HubAPI,
        pods: PodSource,
        quotas: FracnbQuotas,
        settings: cullpass.CullSettings,
        hub_auth: HubAuth,
        clock: cullpass.Clock = cullpass.utcnow,
        hibernator: Hibernator | None = None,
        report_interval: float = 60.0,
    ) -> None:
        self.hub, self.pods, self.settings, self.hub_auth = hub, pods, settings, hub_auth
        self.hibernator = hibernator  # None: culled servers are stopped without a hibernation
        self.quota_policy = quotas.policy()
        self.metrics = CullMetrics()
        self.facts = MeterFacts(report_interval, self.metrics)  # what the notebooks report: use, GPU-unused time
        self.busy_marks = BusyMarks(pods)  # their kernels' busy state, on their pods for the hub's placement
        self.metrics.observe_quotas(self.quota_policy)
        # Which extended resources are GPUs (the backends' settings), for the GPU unit gauges; None: not measured.
        self.is_gpu: Callable[[str], bool] | None = None
        self._capacity_refused = False
        self.clock = clock
        # The admin page's list while the history is not open.
        self.culls_this_run: deque[StopNotice] = deque(maxlen=RECENT_CULLS)
        self._stopping: dict[tuple[str, str], StopNotice] = {}  # recorded, until the pass says it stopped
        self.history: Any = None  # the session history's session factory, once opened
        self.history_metrics = HistoryMetrics(self.metrics.registry)
        self.advice_menu: Menu | None = None  # the hub's profile menu, for the users' advice (api/advice)
        self.named_servers = False  # the hub's JupyterHub.allow_named_servers (its default: one server a user)
        self.pending_reports = PendingReports()  # session reports kept while the database is away
        self.unwritten_stops: list[StopNotice] = []  # stop notices kept while the database is not open or away
        self.kept_stops_file: Path | None = None  # where those outlive a restart (service/keptstops.py)
        self.choices = HubChoices()  # the hub's profile list: display names and slot kinds
        self.zone: ZoneInfo | None = None  # of the times the page shows: the hub's FracnbQueue.display_timezone
        # With c.FracnbQueue.engine "kueue": its kueue_local_queue, naming each user's LocalQueue (the page's team
        # quota is that LocalQueue's ClusterQueue); None with the builtin queue.
        self.kueue_local_queue: str | None = None

    def hibernates(self, reason: str) -> bool:
        """Whether the service's stop of a GPU server for ``reason`` asks it to save its variables first."""
        return self.hibernator is not None and self.hibernator.settings.applies(reason)

    async def user_report(self, name: str) -> dict[str, Any]:
        report = await cullpass.user_report(
            self.hub, self.pods, self.quota_policy, self.settings, name, clock=self.clock, facts=self.facts,
            hibernates=self.hibernates,
        )  # fmt: skip
        stopped = stopped_servers(await self.latest_stops(name), running=report["culling"])
        if stopped:  # only while there is one: a meter of an older version refuses fields it does not know
            report["stopped"] = stopped
        borrowing = (
            borrowing_note(await team_of(self.pods, self.kueue_local_queue, name)) if report["servers"] else None
        )
        if borrowing:  # likewise only then
            report["borrowing"] = borrowing
        return report

    async def resume_pass(self) -> ResumeReport:
        report = await resume_pass(self.hub, await self.pods.list_pods(), self.clock())
        self.metrics.resumed.inc(len(report.resumed))
        return report

    async def cull_pass(self) -> cullpass.PassReport:
        report = await cullpass.cull_pass(
            self.hub, self.pods, self.settings, self.metrics, clock=self.clock, hibernator=self.hibernator,
            facts=self.facts, before_stop=self.record_stop,
        )  # fmt: skip
        for user, server, reason in report.culled:
            recorded = self._stopping.get((user, server))
            self.culls_this_run.append(recorded or StopNotice(user, server, self.clock(), reason))
        self._stopping.clear()
        await self.observe_gpu_kinds()
        return report

    async def observe_gpu_kinds(self) -> None:
        """The GPU unit gauges, from one LIST of nodes and of live pods cluster-wide (as the admin
        page reads them). Without the RBAC for that the gauges stay empty, said once in the log."""
        if self.is_gpu is None:
            return
        try:
            nodes, pods = await self.pods.gpu_capacity()
        except Exception as error:
            if not self._capacity_refused:
                log.warning(
                    "No GPU unit metrics: cannot list nodes and pods cluster-wide (see helm-values/rbac.yaml): %s",
                    error,
                )
            self._capacity_refused = True
            return
        self._capacity_refused = False
        self.metrics.observe_gpu_kinds(gpu_kinds(nodes, pods, self.is_gpu))

    async def record_stop(self, verdict: cullpass.ServerVerdict, reason: str, hibernation: Hibernation | None) -> None:
        """Keep why a server is stopped and what its hibernation saved, for its user's next page
        (history/stopnotices.py), before the hub stops it."""
        details = {"hibernation": hibernation_json(hibernation)} if hibernation is not None else {}
        notice = StopNotice(verdict.user, verdict.server, self.clock(), reason, verdict.limit_seconds, details)
        self._stopping[(verdict.user, verdict.server)] = notice
        await self.write_stop(notice)

    async def write_stop(self, notice: StopNotice) -> None:
        """Keep ``notice`` in the session history; while that is not open yet (the first seconds after a start,
        when a notebook Kueue preempts may already tell its save) or cannot be written, keep it here until
        :meth:`write_unwritten_stops` can (in memory, and in :attr:`kept_stops_file` for a restart)."""
        if not await self._stored(notice):
            self.unwritten_stops.append(notice)
            save_kept_stops(self.kept_stops_file, self.unwritten_stops)

    async def _stored(self, notice: StopNotice) -> bool:
        if self.history is None:
            return False
        try:
            await asyncio.to_thread(record_stop, self.history, notice)
        except Exception as error:
            self.history_metrics.database_errors.labels(operation="record-stop").inc()
            log.warning("Could not write the stop of %s (%s); kept to write later",
                        server_shown(notice.user, notice.server), error)  # fmt: skip
            return False
        return True

    async def write_unwritten_stops(self) -> int:
        """Write the stop notices kept while the history was not open or away; how many were written. Those
        kept meanwhile, and those it still cannot write, stay kept (the file too: it changes once, at the end)."""
        if self.history is None or not self.unwritten_stops:
            return 0
        written = {id(notice) for notice in list(self.unwritten_stops) if await self._stored(notice)}
        self.unwritten_stops = [notice for notice in self.unwritten_stops if id(notice) not in written]
        save_kept_stops(self.kept_stops_file, self.unwritten_stops)
        return len(written)

    async def record_stop_save(self, user: str, server: str, report: dict[str, Any]) -> StopNotice | None:
        """Keep the notice of a stop Kueue made, with what the server saved as it stopped (service/api/stopsaves.py)."""
        pod = server_pod(await self.pods.list_pods(), user, server)
        notice = kueue_stop_notice(pod, user, server, report, self.zone)
        if notice is None:
            log.info(
                "%s saved at its stop, which Kueue did not make (no eviction on its pod): the stop's own notice "
                "stands, no Kueue notice",
                server_shown(user, server),
            )
            return None
        log.info("%s: %s", server_shown(user, server), notice.details["text"])
        await self.write_stop(notice)
        return notice

    async def recent_culls(self) -> list[StopNotice]:
        """The newest culls of every user, newest first, for the admin page: from the session history (the
        same after a restart), or this run's while it is not open or cannot be read."""
        if self.history is not None:
            try:
                return await asyncio.to_thread(recent_culls_of, self.history, now=self.clock(), limit=RECENT_CULLS)
            except Exception as error:
                log.warning("Could not read the recent culls: %s", error)
        return sorted(self.culls_this_run, key=lambda cull: naive_utc(cull.stopped_at), reverse=True)

    async def latest_stops(self, user: str) -> list[StopNotice]:
        """The last stop of each of the user's servers, newest first; [] without a history or when it
        cannot be read."""
        if self.history is None:
            return []
        try:
            return await asyncio.to_thread(latest_stops, self.history, user, now=self.clock())
        except Exception as error:
            log.warning("Could not read the stops of %r: %s", user, error)
            return []
