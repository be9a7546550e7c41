"""One run of the simulated day on the testbed: real spawners, the real scheduler, a virtual clock.

Each step of ``step`` virtual seconds: researchers stop servers, the servers' activity reaches
the hub (per the run's :class:`~bench.replay_runs.ActivityFeed`), the run's culler decides on
the hub's view and the real pods, starts that waited too long are given up, researchers at their
desk without a server start one (``spawner.start()``: quota admission and the pod), training jobs
are submitted and finished (plain pods). Then the clock waits for the cluster to settle: every
start is running, refused, or its pod is Pending with no node that could take it (the same
arithmetic as the scheduler's resource fit, only used to know when to stop waiting). Last,
one pod list gives the snapshot that is measured.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from bench.replay_cards import CardModel
from bench.replay_measures import Holder, Outcomes, StepFigures, step_figures
from bench.replay_model import Day, Kind, Parameters, Researcher, Segment, TrainingJob
from bench.replay_runs import DAY_ORIGIN, HubServer, RunSetup
from fracnb_spawner.cluster.nodes import requested_by_node

log = logging.getLogger("replay")
RETRY_AFTER = 600  # assumption: a refused researcher tries again after 10 minutes ...
MAX_ATTEMPTS = 3  # ... up to 3 times, then gives up ...
GIVE_UP_PAUSE = 3600  # ... for an hour
SETTLE_LIMIT = 30.0  # real seconds a step may wait for the cluster to settle
JOB_LABEL = "replay.fracnb.io/job"
QUEUE_GATE = "fracnb.io/queue"  # the queue's scheduling gate (issue 11's contract)
GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared")


@dataclass
class Desk:
    """One researcher's server as the hub sees it, and their attempts to get one."""

    researcher: Researcher
    spawner: Any
    task: asyncio.Future | None = None
    wanted_since: int | None = None
    attempt_since: int = 0
    attempt_real: float = 0.0
    attempts: int = 0
    retry_at: int = 0
    running_since: int | None = None
    server_activity: int = 0
    hub_activity: int = 0
    last_report: int = 0

    @property
    def name(self) -> str:
        return self.researcher.name

    def kernel_busy(self, moment: int) -> Segment | None:
        """The busy segment at ``moment``, if the running server's kernel is in it (started after the server)."""
        segment = self.researcher.segment_at(moment)
        if self.running_since is None or segment is None or not segment.gpu_busy:
            return None
        return segment if segment.start >= self.running_since else None


@dataclass
class Counters:
    waits: list[float] = field(default_factory=list)
    refused: int = 0
    given_up: int = 0
    busy_culled: int = 0
    culled: int = 0
    jobs_finished: int = 0
    jobs_submitted: int = 0


def pod_dict(pod: Any) -> dict[str, Any]:
    return pod if isinstance(pod, dict) else {}


def gpu_request(pod: dict[str, Any]) -> tuple[str, int] | None:
    for container in pod.get("spec", {}).get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        for resource in GPU_RESOURCES:
            if resource in limits:
                return resource, int(str(limits[resource]))
    return None


def fits_somewhere(pod: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> bool:
    """Whether some node matching the pod's selector has the GPUs it asks for free now."""
    request = gpu_request(pod)
    if request is None:
        return True
    resource, amount = request
    used = requested_by_node(pods, resource)
    selector = pod.get("spec", {}).get("nodeSelector") or {}
    for node in nodes:
        labels = node["metadata"].get("labels") or {}
        if any(labels.get(k) != v for k, v in selector.items()):
            continue
        allocatable = int(str(node["status"]["allocatable"].get(resource, 0)))
        if allocatable - used.get(node["metadata"]["name"], 0) >= amount:
            return True
    return False


def undecided(pod: dict[str, Any] | None, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> bool:
    """A pod the scheduler or KWOK has yet to act on (missing pods are undecided too)."""
    if pod is None:
        return True
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return True
    if pod.get("spec", {}).get("nodeName"):
        return pod.get("status", {}).get("phase") != "Running"
    return fits_somewhere(pod, nodes, pods)


def waits_for_a_slot(pod: dict[str, Any] | None, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> bool:
    """A start's pod that waits: held in the hub's queue (its scheduling gate, docs/contract.md),
    or Pending and unbound with no node that has room for it now."""
    if pod is None or pod.get("spec", {}).get("nodeName") or pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    gates = pod.get("spec", {}).get("schedulingGates") or []
    if any(gate.get("name") == QUEUE_GATE for gate in gates):
        return True  # the hub lifts the gate in its own time; the next step sees it
    return not fits_somewhere(pod, nodes, pods)


class DayRun:
    """The state of one run through the day; :meth:`run` drives it."""

    def __init__(
        self,
        setup: RunSetup,
        day: Day,
        *,
        params: Parameters,
        step: int,
        core: Any,
        namespace: str,
        packed: bool = False,
    ) -> None:
        self.setup, self.day, self.params, self.step, self.packed = setup, day, params, step, packed
        self.core, self.namespace = core, namespace
        self.desks: dict[str, Desk] = {}
        self.counters = Counters(jobs_submitted=len(day.jobs))
        self.steps: list[StepFigures] = []
        self.jobs_running: dict[str, int] = {}
        self.jobs: dict[str, TrainingJob] = {job.name: job for job in day.jobs}
        self.jobs_done: set[str] = set()
        self.nodes: list[dict[str, Any]] = []
        self.cards = CardModel({})
        self.next_cull = setup.culler.every

    # ---- cluster I/O -------------------------------------------------------------------------------------

    async def list_pods(self) -> list[dict[str, Any]]:
        response = await self.core.list_namespaced_pod(self.namespace, _preload_content=False)
        return json.loads(await response.read())["items"]

    async def load_nodes(self) -> None:
        response = await self.core.list_node(_preload_content=False)
        self.nodes = json.loads(await response.read())["items"]
        layout = {}
        for node in self.nodes:
            labels = node["metadata"]["labels"]
            cards = int(labels["nvidia.com/gpu.count"])
            layout[node["metadata"]["name"]] = (cards, int(labels.get("nvidia.com/gpu.replicas", "1")))
        self.cards = CardModel(layout, packed=self.packed)

    # ---- one step --------------------------------------------------------------------------------------------

    async def run(self, make_spawner: Any) -> Outcomes:
        await self.load_nodes()
        for researcher in self.day.researchers:
            self.desks[researcher.name] = Desk(researcher, make_spawner(researcher))
        for moment in range(0, self.day.length, self.step):
            await self.advance(moment)
        await self.finish()
        c = self.counters
        return Outcomes(
            tuple(c.waits), c.refused, c.given_up, c.busy_culled, c.culled, c.jobs_finished, c.jobs_submitted
        )

    async def advance(self, moment: int) -> None:
        await self.stops_by_researchers(moment)
        await self.finish_jobs(moment)
        self.feed_activity(moment)
        if moment >= self.next_cull:  # a pass every `every` seconds, at most one per step
            self.next_cull = (moment // self.setup.culler.every + 1) * self.setup.culler.every
            await self.cull(moment)
        await self.time_out_starts(moment)
        self.request_servers(moment)
        await self.submit_jobs(moment)
        pods = await self.settle()
        await self.collect_starts(moment)
        self.steps.append(self.snapshot(moment, pods))

    def _stopping(self, due: int, moment: int) -> bool:
        """Whether ``due`` falls in the step that ends at ``moment`` (the first step takes time 0 too)."""
        return moment - self.step < due <= moment

    async def stops_by_researchers(self, moment: int) -> None:
        stops = []
        for desk in self.desks.values():
            for session in desk.researcher.sessions:
                if session.stops and self._stopping(session.end, moment):
                    stops.append(self.stop(desk))
                    desk.wanted_since = None
        await asyncio.gather(*stops)

    async def stop(self, desk: Desk) -> None:
        if desk.task is not None and not desk.task.done():
            desk.task.cancel()
            await asyncio.gather(desk.task, return_exceptions=True)
        if desk.task is not None or desk.running_since is not None:
            await desk.spawner.stop()
        desk.task, desk.running_since = None, None

    def feed_activity(self, moment: int) -> None:
        feed = self.setup.activity
        for desk in self.desks.values():
            if desk.running_since is None:
                continue
            segment = desk.researcher.segment_at(moment)
            if (segment is not None and segment.user_active) or (feed.busy_kernel_counts and desk.kernel_busy(moment)):
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
        doomed = set(self.setup.culler.to_cull(servers, await self.list_pods(), now))
        for desk in running:
            if desk.name in doomed:
                self.counters.culled += 1
                if desk.kernel_busy(moment):
                    self.counters.busy_culled += 1
                    log.info("%s: culled %s while its kernel was busy", self.setup.name, desk.name)
        await asyncio.gather(*(self.stop(d) for d in running if d.name in doomed))

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
        for desk in self.desks.values():
            segment = desk.researcher.segment_at(moment)
            if desk.running_since is not None or desk.task is not None or moment < desk.retry_at:
                continue
            if segment is None or not segment.wants_server:
                continue
            desk.wanted_since = moment if desk.wanted_since is None else desk.wanted_since
            desk.attempt_since, desk.attempt_real = moment, time.perf_counter()
            desk.spawner.user_options = {"profile": self.setup.profile_for(desk.researcher.need)}
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
            desk.running_since = desk.server_activity = desk.hub_activity = desk.last_report = moment
            desk.wanted_since, desk.attempts = None, 0

    # ---- training jobs -----------------------------------------------------------------------------------

    def job_manifest(self, job: TrainingJob) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": job.name, "labels": {JOB_LABEL: "true"}},
            "spec": {
                "nodeSelector": {"node-pool": "training"},
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "train",
                        "image": "example.invalid/train",
                        "resources": {"limits": {"nvidia.com/gpu": str(job.gpus)}},
                    }
                ],
            },
        }

    async def submit_jobs(self, moment: int) -> None:
        due = [job for job in self.day.jobs if self._stopping(job.submit, moment)]
        for job in due:
            await self.core.create_namespaced_pod(self.namespace, self.job_manifest(job))

    async def finish_jobs(self, moment: int) -> None:
        done = [name for name, since in self.jobs_running.items() if moment - since >= self.jobs[name].duration]
        for name in done:
            await self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
            del self.jobs_running[name]
            self.jobs_done.add(name)
            self.counters.jobs_finished += 1

    # ---- settling and measuring ------------------------------------------------------------------------------

    async def settle(self) -> list[dict[str, Any]]:
        """Wait until no start or job is still being acted on; return the last pod list."""
        started = time.perf_counter()
        while True:
            pods = await self.list_pods()
            by_name = {p["metadata"]["name"]: p for p in pods}
            waiting = [
                d.name
                for d in self.desks.values()
                if d.task is not None
                and not d.task.done()
                and not waits_for_a_slot(by_name.get(d.spawner.pod_name), self.nodes, pods)
            ]
            waiting += [
                name
                for name, pod in by_name.items()
                if JOB_LABEL in (pod["metadata"].get("labels") or {}) and undecided(pod, self.nodes, pods)
            ]
            if not waiting:
                return pods
            if time.perf_counter() - started > SETTLE_LIMIT:
                log.warning("%s: still settling after %.0f s: %s", self.setup.name, SETTLE_LIMIT, waiting[:5])
                return pods
            await asyncio.sleep(0.05)

    def snapshot(self, moment: int, pods: list[dict[str, Any]]) -> StepFigures:
        holders = []
        owners = {d.spawner.pod_name: d for d in self.desks.values()}
        pool_of = {n["metadata"]["name"]: n["metadata"]["labels"]["node-pool"] for n in self.nodes}
        holding = [p for p in pods if p["spec"].get("nodeName") and gpu_request(p) is not None]
        holding = [p for p in holding if p.get("status", {}).get("phase") == "Running"]
        live = {p["metadata"]["uid"] for p in holding}
        for uid in list(self.cards.placements):  # the device plugin frees a card share when its pod is gone
            if uid not in live:
                self.cards.release(uid)
        for pod in holding:
            name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
            placement = self.cards.place(pod["metadata"]["uid"], node)
            if name in self.jobs:
                self.jobs_running.setdefault(name, moment)
                holders.append(
                    Holder(placement.card, pool_of[node], placement.share, True, self.params.sm_demand_job, False)
                )
                continue
            desk = owners.get(name)
            busy = desk.kernel_busy(moment) if desk is not None and desk.running_since is not None else None
            demand = 0.0
            if busy is not None:
                demand = self.params.sm_demand_burst if busy.kind is Kind.BURST else self.params.sm_demand_silent
            holders.append(Holder(placement.card, pool_of[node], placement.share, busy is not None, demand))
        return step_figures(moment, holders)

    async def finish(self) -> None:
        await asyncio.gather(*(self.stop(d) for d in self.desks.values()))
        for name in list(self.jobs_running):
            await self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
