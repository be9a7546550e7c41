"""The service's plain async core: one culling pass, and one user's status report.

Time comes from the ``clock`` argument (default :func:`utcnow`), so tests decide what
"now" is. Hub and pods come in as objects (:class:`.hubapi.HubAPI`, a :class:`.pods.PodSource`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any

from fracnb_spawner.borrowing.reading import with_training_waits
from fracnb_spawner.common.logsafe import server_shown
from fracnb_spawner.common.podkeys import FRACTION_ANNOTATION, SERVERNAME_ANNOTATION, USERNAME_ANNOTATION, is_waiting
from fracnb_spawner.culling import (
    Action,
    CullDecision,
    CullPolicy,
    GpuUnused,
    HibernatingDemand,
    decide,
    policy_from_annotations,
    server_activity,
    server_status,
)
from fracnb_spawner.hibernation.client import Hibernation, server_url
from fracnb_spawner.hibernation.culled import Hibernator, metric_outcome, spares_server
from fracnb_spawner.queue.demand import demand_since, slot_kind
from fracnb_spawner.queue.localqueues import local_queue_of
from fracnb_spawner.quota.policy import QuotaPolicy, allocations_from_pods, parse_gpus, pod_profile, usage_report
from fracnb_spawner.service.hubapi import HubAPI
from fracnb_spawner.service.meterfacts import MeterFacts
from fracnb_spawner.service.metrics import CullMetrics
from fracnb_spawner.service.pods import PodSource, queue_demand

log = logging.getLogger("fracnb.service")

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class PodFacts:
    """What the culler reads from a server's pod."""

    annotations: Mapping[str, str]
    profile: str
    fraction: Fraction
    slot_kind: str = ""
    queued: bool = False
    address: str | None = None  # the pod's IP and the notebook's port, where the service reaches the server
    port: int | None = None
    local_queue: str = ""  # with the kueue engine: "namespace/name" of the pod's LocalQueue


@dataclass(frozen=True)
class CullSettings:
    default_policy: CullPolicy
    warning_lead: float
    concurrency: int = 10
    page_size: int = 0
    # The shorter timeout under demand and warning of GPU servers whose stop under demand hibernates first;
    # None while such a stop does not hibernate (hibernation off).
    hibernating: HibernatingDemand | None = None


@dataclass
class PassReport:
    """What one pass saw and did; ``culled`` lists ``(user, server, reason)``."""

    servers: int = 0
    warned: int = 0
    warned_servers: list[str] = field(default_factory=list)  # each as the log names it (server_shown)
    culled: list[tuple[str, str, str]] = field(default_factory=list)
    failed: int = 0
    duration: float = 0.0
    # The hibernation of each culled server that was asked to save (user, server) -> what came of it.
    hibernations: dict[tuple[str, str], Hibernation] = field(default_factory=dict)
    spared: int = 0  # GPU-unused stops called off: a kernel had turned busy


def index_pods(pods: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], PodFacts]:
    """Pods by (username, servername), from KubeSpawner's annotations."""
    index = {}
    for pod in pods:
        metadata = pod.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        user = annotations.get(USERNAME_ANNOTATION)
        if not user:
            continue
        try:
            fraction = parse_gpus(annotations.get(FRACTION_ANNOTATION, "0"))
        except ValueError:
            fraction = Fraction(0)
        profile = pod_profile(metadata)
        key = (user, annotations.get(SERVERNAME_ANNOTATION, ""))
        address, port = _reach(pod)
        index[key] = PodFacts(
            annotations=annotations, profile=profile, fraction=fraction, slot_kind=slot_kind(pod),
            queued=is_waiting(pod), address=address, port=port,
            local_queue=local_queue_of(pod),
        )  # fmt: skip
    return index


def _reach(pod: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """The pod's IP and its notebook container's port (KubeSpawner names it ``notebook-port``)."""
    address = (pod.get("status") or {}).get("podIP")
    for container in (pod.get("spec") or {}).get("containers") or []:
        ports = container.get("ports") or []
        named = [p for p in ports if p.get("name") == "notebook-port"] or ports
        if named:
            return address, named[0].get("containerPort")
    return address, None


@dataclass(frozen=True)
class Judge:
    """Decides servers at ``now``: their pod's policy, and the demand for the slot each holds.

    ``demand`` maps slot kinds to since when someone has waited for them (:func:`demand_since`);
    ``queue_demand`` Kueue's LocalQueues to since when a Workload has waited for quota a server in one could give
    back (:func:`fracnb_spawner.queue.kueue.quota.local_queue_demand`).
    """

    default_policy: CullPolicy
    warning_lead: float
    demand: Mapping[str, datetime]
    now: datetime
    facts: MeterFacts | None = None  # what the servers' notebooks reported: their last use, GPU-unused time
    queue_demand: Mapping[str, datetime] = field(default_factory=dict)
    hibernating: HibernatingDemand | None = None  # CullSettings.hibernating

    def __call__(
        self, model: Mapping[str, Any], pod: PodFacts | None, who: tuple[str, str] = ("", "")
    ) -> tuple[CullPolicy, CullDecision]:
        """The server's policy and decision; ``who`` is (user, server), for what its notebook reported."""
        policy, decision, _ = self.judged(model, pod, who)
        return policy, decision

    def judged(
        self, model: Mapping[str, Any], pod: PodFacts | None, who: tuple[str, str]
    ) -> tuple[CullPolicy, CullDecision, GpuUnused | None]:
        policy = policy_from_annotations(pod.annotations if pod else {}, self.default_policy)
        demand_lead = None
        if self.hibernating is not None and pod is not None and pod.fraction > 0:  # its stop saves its variables
            policy, demand_lead = self.hibernating.policy(policy), self.hibernating.lead(self.warning_lead)
        activity = server_activity(model)
        gpu_unused = None
        if self.facts is not None:
            # The notebook's own report of use, where it sent one, rather than the hub's activity
            # (which counts a browser tab's polling), and its GPU-unused time.
            activity = self.facts.activity(who, activity, self.now)
            gpu_unused = self.facts.gpu_unused(who, activity, self.now)
        decision = decide(
            activity,
            policy,
            now=self.now,
            warning_lead=self.warning_lead,
            demand_since=self.demand_for(pod),
            gpu_unused=gpu_unused,
            demand_lead=demand_lead,
        )
        return policy, decision, gpu_unused

    def demand_for(self, pod: PodFacts | None) -> datetime | None:
        """Since when someone has waited for what the server holds: its kind of slot, or its Kueue quota."""
        if pod is None or pod.queued:
            return None
        found = [self.demand.get(pod.slot_kind) if pod.slot_kind else None, self.queue_demand.get(pod.local_queue)]
        return min((since for since in found if since is not None), default=None)

    def status(
        self,
        model: Mapping[str, Any],
        pod: PodFacts | None,
        who: tuple[str, str],
        hibernates: Callable[[str], bool] = lambda _: False,
    ) -> dict[str, Any]:
        """The server's ``cullStatus`` for ``api/me``; ``hibernates`` says whether a stop for a reason saves first."""
        policy, decision, gpu_unused = self.judged(model, pod, who)
        saves = saves_variables(pod, decision, hibernates)
        return server_status(decision, policy, gpu_unused, saves_variables=saves)


def saves_variables(pod: PodFacts | None, decision: CullDecision, hibernates: Callable[[str], bool]) -> bool:
    """Whether the service's stop at ``decision``'s deadline asks the server to save its variables first: a GPU
    server (a CPU-only one is never asked), and hibernation on for that reason (``hibernates``, the service's
    :meth:`~.state.ServiceState.hibernates`)."""
    return bool(pod is not None and pod.fraction > 0 and decision.reason and hibernates(decision.reason.value))


def judge_for(
    settings: CullSettings,
    pods: Iterable[Mapping[str, Any]],
    now: datetime,
    facts: MeterFacts | None = None,
    queue_demand: Mapping[str, datetime] | None = None,
) -> Judge:
    """``queue_demand``: Kueue's demand per LocalQueue, or None where it was not read (then a notebook on Kueue's
    gate counts as demand for its slot kind, the broader reading)."""
    slot_demand = demand_since(pods, kueue_gate=queue_demand is None)
    return Judge(
        settings.default_policy,
        settings.warning_lead,
        slot_demand,
        now,
        facts,
        queue_demand or {},
        settings.hibernating,
    )


@dataclass(frozen=True)
class ServerVerdict:
    user: str
    server: str
    model: Mapping[str, Any]
    pod: PodFacts | None
    decision: CullDecision
    policy: CullPolicy = field(default_factory=CullPolicy)

    @property
    def limit_seconds(self) -> float | None:
        """The limit that stops it: the idle timeout (under demand, the shorter one) or the maximum age."""
        reason = self.decision.reason.value if self.decision.reason else "idle"
        limits = {
            "idle": self.policy.idle_timeout,
            "demand": self.policy.idle_timeout_under_demand,
            "gpu-unused": self.policy.gpu_unused_timeout,
            "gpu-unused-busy": self.policy.gpu_unused_busy_timeout,
            "max-age": self.policy.max_age,
        }
        return limits.get(reason) or None


# Told of a server about to be stopped, after its hibernation and before the hub is asked (the stop's
# record, for its user): the verdict, the reason, and the hibernation (None when none was asked).
BeforeStop = Callable[[ServerVerdict, str, Hibernation | None], Awaitable[None]]


async def _hibernate(
    hibernator: Hibernator | None, metrics: CullMetrics, report: PassReport, verdict: ServerVerdict, reason: str
) -> bool:
    """Ask the server to hibernate when that applies; False when the stop is called off (:func:`spares_server`)."""
    if hibernator is None or verdict.pod is None:
        return True
    pod = verdict.pod
    url = server_url(pod.address, pod.port, verdict.model.get("url"))
    hibernation = await hibernator.before_stop(
        user=verdict.user, server=verdict.server, reason=reason, fraction=pod.fraction, url=url
    )
    if hibernation is None:
        return True
    outcome = metric_outcome(hibernation)
    if outcome is not None:
        metrics.record_hibernation(outcome)
    if spares_server(reason, hibernation):
        log.info(
            "Not stopping %s: a kernel turned busy since its GPU-unused report",
            server_shown(verdict.user, verdict.server),
        )
        report.spared += 1
        return False
    report.hibernations[(verdict.user, verdict.server)] = hibernation
    return True


async def _stop(
    hub: HubAPI,
    metrics: CullMetrics,
    report: PassReport,
    verdict: ServerVerdict,
    *,
    clock: Clock,
    hibernator: Hibernator | None = None,
    facts: MeterFacts | None = None,
    before_stop: BeforeStop | None = None,
) -> None:
    decision, pod, model = verdict.decision, verdict.pod, verdict.model
    reason = decision.reason.value if decision.reason else "idle"
    try:
        if not await _hibernate(hibernator, metrics, report, verdict, reason):
            return
    except Exception:  # whatever happened, the server is stopped
        log.exception("Hibernation of %s failed", server_shown(verdict.user, verdict.server))
    if before_stop is not None:
        try:
            await before_stop(verdict, reason, report.hibernations.get((verdict.user, verdict.server)))
        except Exception:  # the record is for the notice: the stop goes ahead without it
            log.exception("Could not record the stop of %s", server_shown(verdict.user, verdict.server))
    try:
        code = await hub.stop_server(verdict.user, verdict.server)
    except Exception:
        log.exception("Failed to stop %s", server_shown(verdict.user, verdict.server))
        metrics.cull_failures.inc()
        report.failed += 1
        return
    if facts is not None:
        facts.forget((verdict.user, verdict.server))
    if not code:
        report.hibernations.pop((verdict.user, verdict.server), None)
        return  # already stopped or stopping by other means: nothing reclaimed by us
    activity = server_activity(model)
    idle_since = activity.last_activity or activity.started or clock()
    log.info("Culled %s (%s, HTTP %s)", server_shown(verdict.user, verdict.server), reason, code)
    metrics.record_cull(
        reason=reason,
        profile=pod.profile if pod else (model.get("user_options") or {}).get("profile", ""),
        fraction=pod.fraction if pod else Fraction(0),
        idle_seconds=(clock() - idle_since).total_seconds(),
    )
    report.culled.append((verdict.user, verdict.server, reason))


def judge_page(
    page: Iterable[Mapping[str, Any]],
    by_server: Mapping[tuple[str, str], PodFacts],
    judge: Judge,
) -> Iterator[ServerVerdict]:
    """Decide every server of a page of user models."""
    for user in page:
        for name, model in (user.get("servers") or {}).items():
            pod = by_server.get((user["name"], name))
            policy, decision = judge(model, pod, (user["name"], name))
            yield ServerVerdict(user["name"], name, model, pod, decision, policy)


async def _observe_groups(hub: HubAPI, metrics: CullMetrics, pods: list[Mapping[str, Any]], groups: set[str]) -> None:
    """The per-group gauge, for the groups of users with a ready server and those with a quota; a hub that cannot tell
    their members leaves the gauge as it was rather than fail the pass."""
    try:
        members = await hub.members_of(groups)
    except Exception:
        log.exception("Could not read the hub's groups for the per-group GPU gauge")
        return
    metrics.observe_groups(pods, members)


async def cull_pass(
    hub: HubAPI,
    pods: PodSource,
    settings: CullSettings,
    metrics: CullMetrics,
    *,
    clock: Clock = utcnow,
    hibernator: Hibernator | None = None,
    facts: MeterFacts | None = None,
    before_stop: BeforeStop | None = None,
) -> PassReport:
    """Decide every ready server and stop those past their deadline, a few at a time; a GPU server
    stopped for idleness is asked to hibernate first (``hibernator``).

    The pod LIST runs while the first page of users loads; stops start while later pages load.
    """
    started = time.perf_counter()
    report = PassReport()
    pod_listing = asyncio.ensure_future(pods.list_pods())
    demand_reading = asyncio.ensure_future(queue_demand(pods))
    slots = asyncio.Semaphore(settings.concurrency)
    stops: list[asyncio.Future[None]] = []

    async def stop_bounded(verdict: ServerVerdict) -> None:
        async with slots:
            await _stop(
                hub, metrics, report, verdict, clock=clock, hibernator=hibernator, facts=facts, before_stop=before_stop
            )

    try:
        pod_list: list[Mapping[str, Any]] | None = None
        by_server: Mapping[tuple[str, str], PodFacts] = {}
        judge: Judge | None = None
        groups: set[str] = set()
        now = clock()
        async for page in hub.iter_users(state="ready", page_size=settings.page_size):
            groups.update(group for user in page for group in user.get("groups") or [])
            if pod_list is None or judge is None:
                pod_list = await pod_listing
                by_server = index_pods(pod_list)
                judge = judge_for(settings, pod_list, now, facts, await demand_reading)
                judge = await with_training_waits(judge, pods, pod_list)  # borrowed cards (docs/lending.md)
                metrics.observe_pods(pod_list, now)
            for verdict in judge_page(page, by_server, judge):
                report.servers += 1
                if verdict.decision.action is Action.WARN:
                    report.warned += 1
                    report.warned_servers.append(server_shown(verdict.user, verdict.server))
                elif verdict.decision.action is Action.CULL:
                    stops.append(asyncio.ensure_future(stop_bounded(verdict)))
        await asyncio.gather(*stops)
        if pod_list is not None:
            await _observe_groups(hub, metrics, pod_list, groups | metrics.quota_groups)
    finally:
        for reading in (pod_listing, demand_reading):
            if not reading.done():
                reading.cancel()
    report.duration = time.perf_counter() - started
    metrics.warned.set(report.warned)
    metrics.pass_duration.observe(report.duration)
    metrics.last_pass.set(time.time())
    return report


async def user_report(
    hub: HubAPI,
    pods: PodSource,
    quotas: QuotaPolicy,
    settings: CullSettings,
    name: str,
    *,
    clock: Clock = utcnow,
    facts: MeterFacts | None = None,
    hibernates: Callable[[str], bool] = lambda _: False,
) -> dict[str, Any]:
    """``GET api/me``: the user's GPU use and quotas, and each server's culling status (``hibernates``: whether
    the service's stop for a reason asks a GPU server to save its variables first)."""
    user, pod_list, demand = await asyncio.gather(hub.user(name), pods.list_pods(), queue_demand(pods))
    group_names = list(user.get("groups") or [])
    members = await asyncio.gather(*(hub.group_members(g) for g in group_names))
    report = usage_report(
        quotas,
        allocations_from_pods(pod_list),
        user=name,
        groups=dict(zip(group_names, members, strict=True)),
    )
    by_server = index_pods(pod_list)
    judge = await with_training_waits(judge_for(settings, pod_list, clock(), facts, demand), pods, pod_list)
    culling = {}
    for server, model in sorted((user.get("servers") or {}).items()):
        culling[server] = judge.status(model, by_server.get((name, server)), (name, server), hibernates)
    report["culling"] = culling
    report["warning_lead_seconds"] = settings.warning_lead
    return report
