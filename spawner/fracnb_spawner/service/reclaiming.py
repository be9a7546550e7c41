"""The fracnb service's reclaim pass: evicts lower-priority pods whose DRA claims hold what a queued
notebook needs (docs/lending.md). The choice is :func:`.reclaim.victims.plan_reclaims`'s; this module
reads the cluster, asks the Eviction API and writes an event on each evicted pod; at start it reads those
events back, so that the per-minute limit holds across a restart (:mod:`.reclaim.times`).

Each pass lists nodes, pods, ResourceSlices, ResourceClaims and PodDisruptionBudgets once, cluster-wide.
The Eviction API itself honours the pod's grace period and refuses (429) what a budget forbids; a
pod already terminating counts as leaving and is not asked again. Only queued notebooks of ``dra``
choices are served: for extended resources kube-scheduler preempts without the service. A queued notebook
that may borrow (``fracnb.io/borrowable``) is served on the borrowable pool too, when its own has no room to make.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram

from fracnb_spawner.cluster.devices import DraWant, schedulable_nodes, trim_claim, trim_slice
from fracnb_spawner.cluster.slots import DraAsk
from fracnb_spawner.common.clock import SYSTEM_CLOCK, Clock
from fracnb_spawner.common.podkeys import FRACTION_ANNOTATION, USERNAME_ANNOTATION
from fracnb_spawner.common.units import QuantityError, gpus_text, parse_fraction
from fracnb_spawner.queue.demand import queue_entries, slot_kind
from fracnb_spawner.reclaim.budgets import blocking_budgets, reclaim_candidates, warning_text
from fracnb_spawner.reclaim.cluster import (
    budgets_of,
    dra_cards,
    is_notebook,
    need_of,
    pod_key,
    usable_cards,
    wants_of,
)
from fracnb_spawner.reclaim.times import EVENT_REASON, EVENT_SELECTOR, EVENT_SOURCE, eviction_ages, reclaim_seconds
from fracnb_spawner.reclaim.victims import Card, PodKey, Policy, evictions_left, plan_reclaims
from fracnb_spawner.service.choices import HubChoices
from fracnb_spawner.service.pods import LIVE_PODS, list_items

log = logging.getLogger("fracnb.reclaim")
Pod = Mapping[str, Any]
OUTCOMES = ("evicted", "refused-by-budget", "gone", "failed")
# The Eviction API's 429 when a PodDisruptionBudget forbids the eviction ("Cannot evict pod as it would
# violate the pod's disruption budget."); the apiserver's own throttling answers 429 with other words.
BUDGET_REFUSAL = "disruption budget"


@dataclass(frozen=True)
class Snapshot:
    """What one pass reads of the cluster."""

    nodes: list[Pod]
    pods: list[Pod]
    slices: list[dict[str, Any]]
    claims: list[dict[str, Any]]
    pdbs: list[Pod]


class ReclaimApi(Protocol):
    async def snapshot(self) -> Snapshot: ...
    async def evict(self, pod: PodKey) -> str:
        """Ask the Eviction API to evict ``pod``: one of :data:`OUTCOMES`."""

    async def record_event(self, pod: Pod, message: str) -> None: ...
    async def reclaim_events(self) -> list[Pod]:
        """The service's own ``Reclaimed`` events, in every namespace (:mod:`.reclaim.times`)."""


class ReclaimMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.reclaims = Counter(
            "fracnb_reclaims",
            "Evictions the service asked for to free DRA devices for a queued notebook, by outcome"
            " (evicted; refused-by-budget: a PodDisruptionBudget forbade it; gone; failed)",
            ["outcome"],
            registry=registry,
        )
        for outcome in OUTCOMES:
            self.reclaims.labels(outcome=outcome)
        self.latency = Histogram(
            "fracnb_reclaim_seconds",
            "Seconds from the first eviction for a queued notebook to its pod being scheduled (its PodScheduled"
            " condition's time)",
            buckets=(1, 2.5, 5, 10, 15, 20, 30, 45, 60, 120, 300),
            registry=registry,
        )


def want_from_choices(choices: HubChoices) -> Callable[[Pod], DraWant | None]:
    """A waiting pod's DRA want, from the hub's choice of its slot kind (None: not a ``dra`` choice)."""
    kinds = choices.kinds()

    def want(pod: Pod) -> DraWant | None:
        found = kinds.get(slot_kind(pod))
        ask = found[0].ask if found else None
        return ask.of_pod(pod).want if isinstance(ask, DraAsk) else None

    return want


def reason_text(waiter: Pod) -> str:
    """ "reclaimed for a 0.25 GPU notebook of alice": the event's message on an evicted pod."""
    annotations = (waiter.get("metadata") or {}).get("annotations") or {}
    try:
        size = gpus_text(parse_fraction(annotations.get(FRACTION_ANNOTATION, "")))
    except QuantityError:
        size = "GPU"
    user = annotations.get(USERNAME_ANNOTATION) or (waiter.get("metadata") or {}).get("namespace", "")
    return f"reclaimed for a {size} notebook of {user}"


class Reclaimer:
    """One reclaim pass at a time; remembers recent evictions (the limit) and whom it evicted for (the latency)."""

    def __init__(
        self,
        api: ReclaimApi,
        policy: Policy,
        per_minute: int,
        want_of: Callable[[Pod], DraWant | None],
        metrics: ReclaimMetrics,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.api, self.policy, self.per_minute, self.want_of = api, policy, per_minute, want_of
        self.metrics, self.clock = metrics, clock
        self.budgets_warned: set[tuple[PodKey, str]] = set()  # (budget, reason) said once, while it lasts
        self.recent: deque[float] = deque()  # monotonic times of the evictions of the last minute
        self.started: dict[PodKey, datetime] = {}  # waiting notebook -> its first eviction's wall time

    def waiters(self, snapshot: Snapshot) -> list[tuple[Pod, DraWant]]:
        """The queued notebooks of ``dra`` choices, in the hub's order."""
        by_key = {pod_key(pod): pod for pod in snapshot.pods}
        found = []
        for entry in queue_entries(snapshot.pods):
            if entry.engine != "builtin":  # on Kueue's gate: it waits for its team's quota, not for a device
                continue
            pod = by_key.get((entry.namespace, entry.pod))
            want = self.want_of(pod) if pod is not None and is_notebook(pod) else None
            if want is not None:
                found.append((pod, want))
        return found

    def observe_latency(self, waiting: set[PodKey], pods: Sequence[Pod]) -> None:
        """The reclaim latency of each notebook served since the last pass, by its pod's own time
        (:func:`.reclaim.times.reclaim_seconds`); one whose gate is lifted but not yet scheduled is looked at
        again next pass, and one deleted meanwhile was given up, not served."""
        present = {pod_key(pod): pod for pod in pods}
        for key in [key for key in self.started if key not in waiting]:
            seconds = reclaim_seconds(self.started[key], present[key]) if key in present else None
            if seconds is not None:
                self.metrics.latency.observe(seconds)
            if seconds is not None or key not in present:
                del self.started[key]

    def remember_evictions(self, ages: Iterable[float]) -> None:
        """Count, towards the per-minute limit, evictions made ``ages`` seconds ago by the service before a
        restart (:func:`remember_recent_evictions`)."""
        now = self.clock.monotonic()
        self.recent.extendleft(sorted((now - age for age in ages), reverse=True))

    def warn_of_budgets(self, snapshot: Snapshot, cards: Sequence[Card]) -> None:
        """Say once, while it lasts, of each PodDisruptionBudget over a pod reclaim could take that it allows
        no eviction (:mod:`.reclaim.budgets`): the pass honours it, so a waiting notebook waits out its wait."""
        blocking = blocking_budgets(snapshot.pdbs, snapshot.pods, reclaim_candidates(cards, self.policy))
        for found in blocking:
            if found not in self.budgets_warned:
                log.warning("%s", warning_text(*found))
        self.budgets_warned = set(blocking)

    async def reclaim_pass(self) -> list[tuple[PodKey, PodKey, str]]:
        """Evict what the queued notebooks need now: (victim, notebook, outcome) per eviction asked."""
        snapshot = await self.api.snapshot()
        waiters = self.waiters(snapshot)
        self.observe_latency({pod_key(pod) for pod, _ in waiters}, snapshot.pods)
        now = self.clock.monotonic()
        while self.recent and now - self.recent[0] >= 60.0:
            self.recent.popleft()
        nodes = schedulable_nodes(snapshot.nodes)
        needs = [
            (
                pod_key(pod),
                [need_of(one, pod, usable_cards(snapshot.slices, one, nodes)) for one in wants_of(want, pod)],
            )
            for pod, want in waiters
        ]  # its own pool's need first, then the borrowable pool's where it may borrow (docs/lending.md)
        cards = dra_cards(snapshot.slices, snapshot.claims, snapshot.pods)
        budgets = budgets_of(snapshot.pdbs, snapshot.pods)
        self.warn_of_budgets(snapshot, cards)
        left = evictions_left(self.recent, now, self.per_minute)
        plan = plan_reclaims(needs, cards, self.policy, budgets, left)
        by_key = {pod_key(pod): pod for pod in snapshot.pods}
        done = []
        for victim, waiter in plan:
            self.recent.append(self.clock.monotonic())  # before asking: an answer lost after the eviction still counts
            outcome = await self.api.evict(victim)
            self.metrics.reclaims.labels(outcome=outcome).inc()
            if outcome == "evicted":
                self.started.setdefault(waiter, self.clock.now())
                message = reason_text(by_key[waiter])
                await self.api.record_event(by_key[victim], message)
                log.info("Evicted %s/%s: %s", *victim, message)
            else:
                log.warning("Could not evict %s/%s for %s/%s: %s", *victim, *waiter, outcome)
            done.append((victim, waiter, outcome))
        return done


class KubeReclaimApi:
    """:class:`ReclaimApi` over kubernetes_asyncio's ``ApiClient``."""

    def __init__(self, api_client: Any, clock: Clock = SYSTEM_CLOCK) -> None:
        from kubernetes_asyncio import client  # noqa: PLC0415 -- hub extra only

        self.core = client.CoreV1Api(api_client)
        self.resource = client.ResourceV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)
        self.clock = clock

    async def snapshot(self) -> Snapshot:
        nodes, pods, slices, claims, pdbs = await asyncio.gather(
            list_items(self.core.list_node, "nodes"),
            list_items(self.core.list_pod_for_all_namespaces, "pods", field_selector=LIVE_PODS),
            list_items(self.resource.list_resource_slice, "resourceslices"),
            list_items(self.resource.list_resource_claim_for_all_namespaces, "resourceclaims"),
            list_items(self.policy.list_pod_disruption_budget_for_all_namespaces, "poddisruptionbudgets"),
        )
        trimmed = [claim for claim in map(trim_claim, claims) if claim is not None]
        return Snapshot(list(nodes), list(pods), [trim_slice(s) for s in slices], trimmed, list(pdbs))

    async def evict(self, pod: PodKey) -> str:
        from kubernetes_asyncio.client.exceptions import ApiException  # noqa: PLC0415

        namespace, name = pod
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        try:  # no deleteOptions: the pod's own terminationGracePeriodSeconds applies
            await self.core.create_namespaced_pod_eviction(name, namespace, body)
        except ApiException as error:
            if error.status == 429 and BUDGET_REFUSAL in str(error.body or ""):
                return "refused-by-budget"
            if error.status == 404:
                return "gone"
            log.warning("Eviction of %s/%s failed: %s %s", namespace, name, error.status, error.reason)
            return "failed"  # the apiserver's own throttling (429 without a budget) included
        except Exception as error:  # a timeout or a dropped connection: the pod may or may not be leaving
            log.warning("Eviction of %s/%s got no answer: %s", namespace, name, error)
            return "failed"
        return "evicted"

    async def reclaim_events(self) -> list[Pod]:
        return list(await list_items(self.core.list_event_for_all_namespaces, "events", field_selector=EVENT_SELECTOR))

    async def record_event(self, pod: Pod, message: str) -> None:
        metadata = pod.get("metadata") or {}
        now = self.clock.now().isoformat().replace("+00:00", "Z")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{metadata.get('name', 'pod')}.", "namespace": metadata.get("namespace")},
            "involvedObject": {
                "apiVersion": "v1", "kind": "Pod", "name": metadata.get("name"),
                "namespace": metadata.get("namespace"), "uid": metadata.get("uid"),
            },
            "reason": EVENT_REASON, "message": message, "type": "Normal",
            "source": {"component": EVENT_SOURCE}, "reportingComponent": EVENT_SOURCE,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }  # fmt: skip
        try:
            await self.core.create_namespaced_event(metadata.get("namespace"), event)
        except Exception as error:  # the eviction stands; only its explanation is lost
            log.warning("Could not write the reclaim event on %s: %s", metadata.get("name"), error)


async def remember_recent_evictions(reclaimer: Reclaimer) -> None:
    """Count the evictions of the last minute made before this start (the service's own events), so that a
    restarted service keeps to ``evictions_per_minute``. Where the events cannot be read (no RBAC to list
    them), the first minute counts as spent: waiting a minute is safer than evicting twice the limit."""
    try:
        events = await reclaimer.api.reclaim_events()
    except Exception as error:
        log.warning(
            "Cannot read the service's Reclaimed events (%s; list on events: helm-values/rbac.yaml): no eviction"
            " in the first minute",
            error,
        )
        reclaimer.remember_evictions([0.0] * reclaimer.per_minute)
        return
    ages = eviction_ages(events, reclaimer.clock.now())
    reclaimer.remember_evictions(ages)
    if ages:
        log.info("%d evictions of the last minute were made before this start: they count to the limit", len(ages))
