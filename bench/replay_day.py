"""One run of the simulated day on the testbed: real spawners, the real scheduler, a virtual clock.

Each step of ``step`` virtual seconds: every researcher's own clock moves on (slower through busy
cells on an over-subscribed card, bench/replay_contention.py), researchers stop servers, training
jobs that are done end, the servers' activity reaches the hub (per the run's
:class:`~bench.replay_runs.ActivityFeed`), the run's culler decides on the hub's view and the real
pods, starts that waited too long are given up, researchers at their desk without a server start
one (``spawner.start()``: quota admission, the queue and the pod), training streams submit jobs
(bench/replay_jobs.py). Then the clock waits for the cluster to settle: every start is running,
refused, or waits for a slot (gated in the queue, or Pending with no room anywhere:
bench/replay_settle.py). With lending (DRA clusters), a notebook start that waits in the development
pool makes the run reclaim lent cards, and the clock waits for that start too; with none waiting,
free development cards are lent to waiting jobs (bench/replay_lending.py). Last, one pod list (and
on DRA clusters one claim list) gives the snapshot that is measured.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from fractions import Fraction
from typing import Any

from bench.replay_cards import CardModel
from bench.replay_claims import claim_cards, quantity_bytes
from bench.replay_contention import FluidBound, PersonalClock, card_stretch
from bench.replay_day_borrowing import Borrowing
from bench.replay_day_lending import Lending
from bench.replay_day_placement import Placing
from bench.replay_jobs import BatchQueue, is_job, job_manifest
from bench.replay_measures import Holder, Outcomes, StepFigures, Waiting, step_figures
from bench.replay_model import Day, Kind, Parameters, Researcher, Segment
from bench.replay_runs import DAY_ORIGIN, HubServer, RunSetup
from bench.replay_settle import (
    Devices,
    asked_share,
    gpu_request,
    on_virtual_clock,
    step_moments,
    undecided,
    waits_for_a_slot,
)

log = logging.getLogger("replay")
RETRY_AFTER = 600  # assumption: a refused researcher tries again after 10 minutes ...
MAX_ATTEMPTS = 3  # ... up to 3 times, then gives up ...
GIVE_UP_PAUSE = 3600  # ... for an hour
SETTLE_LIMIT = 30.0  # real seconds a step may wait for the cluster to settle
POOL_LABEL = "node-pool"
RESOURCE_GROUP, RESOURCE_VERSION = "resource.k8s.io", "v1"


@dataclass
class Desk:
    """One researcher's server as the hub sees it, their attempts to get one, and their own clock."""

    researcher: Researcher
    spawner: Any
    clock: PersonalClock
    task: asyncio.Future | None = None
    wanted_since: int | None = None
    attempt_since: int = 0
    attempt_real: float = 0.0
    attempts: int = 0
    retry_at: int = 0
    running_since: int | None = None  # wall clock
    started_at: float = 0.0  # the researcher's clock when the server started
    server_activity: int = 0
    hub_activity: int = 0
    last_report: int = 0
    stretch: float = 1.0  # how much slower busy work runs on this server's card now
    served: bool = False
    reclaimed_for: bool = False  # lent cards were reclaimed while this start waited

    @property
    def name(self) -> str:
        return self.researcher.name

    def segment(self) -> Segment | None:
        return self.researcher.segment_at(self.clock.now)

    def kernel_busy(self) -> Segment | None:
        """The busy segment the running server's kernel is in (one started after the server), if any."""
        segment = self.segment()
        if self.running_since is None or segment is None or not segment.gpu_busy:
            return None
        return segment if segment.start >= self.started_at else None


@dataclass
class Counters:
    waits: list[float] = field(default_factory=list)
    reclaim_waits: list[float] = field(default_factory=list)
    refused: int = 0
    given_up: int = 0
    culled: int = 0
    busy_culled: int = 0
    demand_culled: int = 0
    state_lost: int = 0
    hibernated: int = 0


# ---- the run ----------------------------------------------------------------------------------------------


class DayRun(Lending, Placing, Borrowing):
    """The state of one run through the day; :meth:`run` drives it."""

    def __init__(
        self,
        setup: RunSetup,
        day: Day,
        *,
        params: Parameters,
        step: int,
        api: Any,
        namespace: str,
        policies: Mapping[str, str],
    ) -> None:
        from kubernetes_asyncio import client

        self.setup, self.day, self.params, self.step = setup, day, params, step
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.namespace, self.policies = namespace, policies
        self.desks: dict[str, Desk] = {}
        self.counters = Counters()
        self.batch = BatchQueue(day.streams, checkpoint=round(params.checkpoint_minutes * 60))
        self.steps: list[StepFigures] = []
        self.nodes: list[dict[str, Any]] = []
        self.pool_of: dict[str, str] = {}
        self.cards = CardModel({})
        self.cards_of_node: dict[str, list[str]] = {}
        self.card_bytes = 0
        self.claims: list[dict[str, Any]] = []
        self.next_cull = setup.culler.every
        self.previous = 0  # the moment of the step before
        self.seconds = step
        self.bound = FluidBound(setup.contention)
        self.card_uuid: dict[str, str] = {}
        self.histories: dict = {}
        self.last_pods: list[dict[str, Any]] = []
        self.tentative: dict[str, Fraction] = {}
        self.preferred: dict[str, str] = {}
        self.borrowed_peak = 0

    # ---- cluster I/O -------------------------------------------------------------------------------------

    async def list_pods(self) -> list[dict[str, Any]]:
        response = await self.core.list_namespaced_pod(self.namespace, _preload_content=False)
        return json.loads(await response.read())["items"]

    async def list_claims(self) -> list[dict[str, Any]]:
        if not self.setup.cards_from_claims:
            return []
        answer = await self.custom.list_namespaced_custom_object(
            RESOURCE_GROUP, RESOURCE_VERSION, self.namespace, "resourceclaims"
        )
        return answer["items"]

    def devices(self) -> Devices | None:
        return Devices(self.cards_of_node, self.card_bytes, self.claims) if self.setup.cards_from_claims else None

    async def load_cards(self) -> None:
        """The schedulable nodes, their pools and cards: device-plugin labels, or the DRA driver's ResourceSlices."""
        response = await self.core.list_node(_preload_content=False)
        nodes = json.loads(await response.read())["items"]
        self.nodes = [n for n in nodes if not (n.get("spec") or {}).get("unschedulable")]
        self.pool_of = {n["metadata"]["name"]: n["metadata"]["labels"].get(POOL_LABEL, "") for n in self.nodes}
        if self.setup.cards_from_claims:
            answer = await self.custom.list_cluster_custom_object(RESOURCE_GROUP, RESOURCE_VERSION, "resourceslices")
            for item in answer["items"]:
                node, devices = item["spec"]["nodeName"], item["spec"]["devices"]
                if node in self.pool_of:
                    self.cards_of_node[node] = [f"{node}/{device['name']}" for device in devices]
                    for device in devices:
                        self.card_uuid[f"{node}/{device['name']}"] = device["attributes"]["uuid"]["string"]
                    self.card_bytes = quantity_bytes(devices[0]["capacity"]["memory"]["value"])
            return
        layout = {}
        for node in self.nodes:
            labels, name = node["metadata"]["labels"], node["metadata"]["name"]
            replicas = int(labels.get("nvidia.com/gpu.replicas", "1"))
            layout[name] = (int(labels["nvidia.com/gpu.count"]), replicas, self.policies.get(name, "distributed"))
        self.cards = CardModel(layout)
        self.cards_of_node = {name: [c for c in self.cards.all_cards() if c.startswith(f"{name}/")] for name in layout}

    def cards_by_pool(self) -> dict[str, list[str]]:
        pools: dict[str, list[str]] = {}
        for node, cards in self.cards_of_node.items():
            pools.setdefault(self.pool_of[node], []).extend(cards)
        return pools

    # ---- one step --------------------------------------------------------------------------------------------

    async def run(self, make_spawner: Any) -> Outcomes:
        await self.load_cards()
        for researcher in self.day.researchers:
            self.desks[researcher.name] = Desk(researcher, make_spawner(researcher), PersonalClock(researcher.segments))
        moments = step_moments(self.day.length, self.step)
        for moment, following in zip(moments, [*moments[1:], self.day.length], strict=True):
            self.seconds = following - moment  # what this step's snapshot stands for
            await self.advance(moment)
        await self.finish()
        c = self.counters
        slowdowns = [value for desk in self.desks.values() for value in desk.clock.slowdowns()]
        return Outcomes(
            waits=tuple(c.waits),
            served=sum(1 for d in self.desks.values() if d.served),
            refused=c.refused,
            given_up=c.given_up,
            culled=c.culled,
            busy_culled=c.busy_culled,
            demand_culled=c.demand_culled,
            state_lost=c.state_lost,
            hibernated=c.hibernated,
            slowdowns=tuple(slowdowns),
            jobs_finished=self.batch.finished_jobs,
            jobs_preempted=self.batch.preempted,
            jobs_reclaimed=self.batch.reclaimed_jobs,
            redone_hours=self.batch.redone / 3600,
            reclaim_waits=tuple(c.reclaim_waits),
            bound_slowdowns=tuple(self.bound.slowdowns()),
            contention=self.setup.contention,
            borrowed_peak=self.borrowed_peak,
        )

    async def advance(self, moment: int) -> None:
        if moment:
            await self.researchers_move_on(moment - self.previous, moment)
        self.previous = moment
        await self.end_jobs(moment)
        self.feed_activity(moment)
        if moment >= self.next_cull:  # a pass every `every` seconds, at most one per step
            self.next_cull = (moment // self.setup.culler.every + 1) * self.setup.culler.every
            await self.cull(moment)
        await self.time_out_starts(moment)
        self.request_servers(moment)
        for name in self.batch.due(moment):
            await self.create_job(name)
        pods = await self.settle()
        if self.setup.lending:
            pods = await self.lend_or_reclaim(moment, pods)
        if self.setup.borrowing:
            pods = await self.borrow(moment, pods)
        await self.collect_starts(moment)
        self.batch.observe(moment, self._running_jobs(pods), {p["metadata"]["name"] for p in pods if is_job(p)})
        self.steps.append(self.snapshot(moment, pods))

    async def researchers_move_on(self, elapsed: int, moment: int) -> None:
        """Each researcher's clock moves on; those whose session ended meanwhile stop their server."""
        stops = []
        for desk in self.desks.values():
            before = desk.clock.now
            desk.clock.advance(elapsed, desk.stretch, running=desk.running_since is not None, wall_now=moment)
            for session in desk.researcher.sessions:
                if session.stops and before < session.end <= desk.clock.now:
                    stops.append(self.stop(desk))
                    desk.wanted_since = None
        await asyncio.gather(*stops)

    async def stop(self, desk: Desk) -> None:
        if desk.task is not None and not desk.task.done():
            desk.task.cancel()
            await asyncio.gather(desk.task, return_exceptions=True)
        if desk.task is not None or desk.running_since is not None:
            await desk.spawner.stop()
        desk.task, desk.running_since, desk.stretch = None, None, 1.0

    def feed_activity(self, moment: int) -> None:
        feed = self.setup.activity
        for desk in self.desks.values():
            if desk.running_since is None:
                continue
            segment = desk.segment()
            if (segment is not None and segment.user_active) or (feed.busy_kernel_counts and desk.kernel_busy()):
                desk.server_activity = moment
            if moment - desk.last_report >= feed.report_every:
                desk.last_report = moment
                desk.hub_activity = max(desk.hub_activity, desk.server_activity)

    async def cull(self, moment: int) -> None:
        running = [d for d in self.desks.values() if d.running_since is not None]
        servers = [
            HubServer(
                d.name, DAY_ORIGIN + timedelta(seconds=d.running_since), DAY_ORIGIN + timedelta(seconds=d.hub_activity)
            )
            for d in running
            if d.running_since is not None
        ]
        now = DAY_ORIGIN + timedelta(seconds=moment)
        queued_at = {d.spawner.pod_name: DAY_ORIGIN + timedelta(seconds=d.attempt_since) for d in self._starting()}
        pods = await self.list_pods()
        doomed = self.setup.culler.to_cull(servers, on_virtual_clock(pods, queued_at), now)
        if self.setup.borrowing:
            doomed = {**self.borrowers_to_stop(pods, moment), **doomed}
        for desk in running:
            if desk.name not in doomed:
                continue
            self.count_cull(desk, doomed[desk.name])
        await asyncio.gather(*(self.stop(d) for d in running if d.name in doomed))

    def count_cull(self, desk: Desk, reason: str) -> None:
        c = self.counters
        c.culled += 1
        c.demand_culled += reason == "demand"
        if desk.kernel_busy():
            c.busy_culled += 1
            c.state_lost += 1  # a busy kernel cannot be saved: its work and its state go
            log.info("%s: culled %s while its kernel was busy", self.setup.name, desk.name)
        elif self.setup.hibernation:
            c.hibernated += 1
        else:
            c.state_lost += 1

    async def time_out_starts(self, moment: int) -> None:
        late = [
            d
            for d in self.desks.values()
            if d.task is not None and not d.task.done() and moment - d.attempt_since >= self.setup.start_timeout
        ]
        await asyncio.gather(*(self.stop(d) for d in late))
        for desk in late:
            self.refused(desk, moment)

    def refused(self, desk: Desk, moment: int) -> None:
        self.counters.refused += 1
        desk.attempts += 1
        desk.retry_at = moment + RETRY_AFTER
        if desk.attempts >= MAX_ATTEMPTS:
            self.counters.given_up += 1
            desk.attempts, desk.wanted_since = 0, None
            desk.retry_at = moment + GIVE_UP_PAUSE

    def request_servers(self, moment: int) -> None:
        self.tentative = {}
        for desk in self.desks.values():
            if desk.running_since is not None or desk.task is not None or moment < desk.retry_at:
                continue
            segment = desk.segment()
            if segment is None or not segment.wants_server:
                continue
            desk.wanted_since = moment if desk.wanted_since is None else desk.wanted_since
            desk.attempt_since, desk.attempt_real = moment, time.perf_counter()
            desk.spawner.user_options = {"profile": self.setup.profile_for(desk.researcher.need)}
            if self.setup.adaptive:
                self.prefer_card(desk, desk.researcher.need)
            desk.task = desk.spawner.start()

    async def collect_starts(self, moment: int) -> None:
        for desk in self.desks.values():
            if desk.task is None or not desk.task.done():
                continue
            task, desk.task = desk.task, None
            if task.cancelled() or task.exception() is not None:
                error = None if task.cancelled() else task.exception()
                log.info("%s: start of %s refused: %s", self.setup.name, desk.name, error)
                await desk.spawner.stop()
                self.refused(desk, moment)
                continue
            waited = moment - (desk.wanted_since if desk.wanted_since is not None else moment)
            if moment == desk.attempt_since:
                waited += time.perf_counter() - desk.attempt_real  # placed at once: the real start time
            self.counters.waits.append(float(waited))
            if desk.reclaimed_for:
                self.counters.reclaim_waits.append(float(waited))
            desk.running_since = desk.server_activity = desk.hub_activity = desk.last_report = moment
            desk.started_at, desk.served = desk.clock.now, True
            desk.wanted_since, desk.attempts, desk.reclaimed_for = None, 0, False

    # ---- training jobs -----------------------------------------------------------------------------------

    async def create_job(self, name: str) -> None:
        manifest = job_manifest(name, dra=self.setup.cards_from_claims, pool=self.batch.pool_of(name))
        await self.core.create_namespaced_pod(self.namespace, manifest)

    async def end_jobs(self, moment: int) -> None:
        for name in self.batch.finished(moment):
            await self.delete_pod(name)

    async def delete_pod(self, name: str) -> None:
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            await self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        except ApiException as error:
            if error.status != 404:  # already gone (preempted)
                raise

    @staticmethod
    def _running_jobs(pods: list[dict[str, Any]]) -> set[str]:
        return {
            p["metadata"]["name"]
            for p in pods
            if is_job(p) and p["spec"].get("nodeName") and p.get("status", {}).get("phase") == "Running"
        }

    # ---- settling and measuring ------------------------------------------------------------------------------

    def _starting(self) -> list[Desk]:
        return [d for d in self.desks.values() if d.task is not None and not d.task.done()]

    async def settle(self, expecting: frozenset[str] | set[str] = frozenset()) -> list[dict[str, Any]]:
        """Wait until no start or job is still being acted on, and the starts of ``expecting`` (researchers
        whose cards were just reclaimed) are done; return the last pod list."""
        started = time.perf_counter()
        while True:
            pods = await self.list_pods()
            self.claims = await self.list_claims()
            devices = self.devices()
            by_name = {p["metadata"]["name"]: p for p in pods}
            waiting = [
                d.name
                for d in self._starting()
                if not waits_for_a_slot(by_name.get(d.spawner.pod_name), self.nodes, pods, devices)
            ]
            waiting += [
                name for name, pod in by_name.items() if is_job(pod) and undecided(pod, self.nodes, pods, devices)
            ]
            waiting += [d.name for d in self._starting() if d.name in expecting and d.name not in waiting]
            if not waiting:
                return pods
            if time.perf_counter() - started > SETTLE_LIMIT:
                log.warning("%s: still settling after %.0f s: %s", self.setup.name, SETTLE_LIMIT, waiting[:5])
                return pods
            await asyncio.sleep(0.05)

    def _placements(self, holding: list[dict[str, Any]]) -> dict[str, tuple[str, Fraction]]:
        """Pod name -> (card, share): from the claims on DRA clusters, else from the device plugin model."""
        if self.setup.cards_from_claims:
            return {pod: (c.card, c.share) for pod, c in claim_cards(self.claims, self.card_bytes).items()}
        live = {p["metadata"]["uid"] for p in holding}
        for uid in list(self.cards.placements):  # the device plugin frees a card share when its pod is gone
            if uid not in live:
                self.cards.release(uid)
        placed = {}
        for pod in holding:
            placement = self.cards.place(pod["metadata"]["uid"], pod["spec"]["nodeName"])
            placed[pod["metadata"]["name"]] = (placement.card, placement.share)
        return placed

    def snapshot(self, moment: int, pods: list[dict[str, Any]]) -> StepFigures:
        owners = {d.spawner.pod_name: d for d in self.desks.values()}
        holding = [p for p in pods if p["spec"].get("nodeName") and p.get("status", {}).get("phase") == "Running"]
        if not self.setup.cards_from_claims:
            holding = [p for p in holding if gpu_request(p) is not None]
        placed = self._placements(holding)
        holders, desk_card = [], {}
        for pod in holding:
            name = pod["metadata"]["name"]
            if name not in placed:
                continue
            card, share = placed[name]
            pool = self.pool_of.get(pod["spec"]["nodeName"], "")
            if is_job(pod):
                holders.append(Holder(card, pool, share, True, self.params.sm_demand_job, notebook=False))
                continue
            desk = owners.get(name)
            busy = desk.kernel_busy() if desk is not None else None
            demand = 0.0
            if busy is not None:
                demand = self.params.sm_demand_burst if busy.kind is Kind.BURST else self.params.sm_demand_silent
            holders.append(Holder(card, pool, share, busy is not None, demand))
            if desk is not None:
                desk_card[desk.name] = card
        self.set_stretches(holders, desk_card)
        self.observe_bound(holders, desk_card)
        if self.setup.borrowing:  # elsewhere a profile's own training cards (whole GPUs) are not borrowed
            self.note_borrowed(holders)
        if self.setup.adaptive:
            log.info("%s: %d of %d claims on the chosen card", self.setup.name, *self.preferences_kept())
        self.last_pods = pods
        by_name = {p["metadata"]["name"]: p for p in pods}
        devices = self.devices()
        waiting = []
        for desk in self._starting():
            pod = by_name.get(desk.spawner.pod_name)
            if pod is not None and waits_for_a_slot(pod, self.nodes, pods, devices):
                pool = (pod["spec"].get("nodeSelector") or {}).get(POOL_LABEL, "")
                waiting.append(Waiting(pool, asked_share(pod)))
        return step_figures(moment, holders, self.cards_by_pool(), waiting, self.seconds)

    def set_stretches(self, holders: list[Holder], desk_card: Mapping[str, str]) -> None:
        """Busy work on a shared card runs slower by the run's contention rule (bench/replay_contention.py)."""
        demands: dict[str, list[float]] = {}
        for holder in holders:
            if holder.busy:
                demands.setdefault(holder.card, []).append(holder.demand)
        for desk in self.desks.values():
            card = desk_card.get(desk.name)
            desk.stretch = card_stretch(self.setup.contention, demands.get(card, [])) if card is not None else 1.0

    def observe_bound(self, holders: list[Holder], desk_card: Mapping[str, str]) -> None:
        """The fluid bound's step: the busy cells of running servers on the cards holding notebooks; and each
        server's time and busy time for the users' history (adaptive placement)."""
        cards = len({h.card for h in holders if h.notebook})
        busy = {}
        for desk in self.desks.values():
            if desk.name not in desk_card:
                continue
            segment = desk.kernel_busy()
            self.note_history(desk, segment is not None, self.seconds)
            if segment is not None:
                index = desk.clock.busy_index()
                demand = self.params.sm_demand_burst if segment.kind is Kind.BURST else self.params.sm_demand_silent
                busy[(desk.name, index if index is not None else segment.start)] = demand
        self.bound.observe(busy, cards, self.seconds)

    async def finish(self) -> None:
        await asyncio.gather(*(self.stop(d) for d in self.desks.values()))
        for name in self.batch.pods():
            await self.delete_pod(name)
