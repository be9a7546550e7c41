"""Prometheus metrics of the culler, in a registry of their own.

``fracnb_idle_gpu_fraction_hours_total`` is the reclaim cost: for every server the culler
stops, its GPU fraction times the hours between the last activity the hub recorded for it
(its start if none) and the moment the hub accepted the stop request. It is GPU time held
by servers nobody used, up to when the culler gave it back. Culls under demand (an idle server
stopped sooner because someone waited for its kind of slot) carry ``reason="demand"``.

The gauges of the queue and of allocated GPUs are as of the last culling pass, read from
the pods it listed: a pod still carrying the ``fracnb.io/queue`` gate or, with the kueue engine,
Kueue's ``kueue.x-k8s.io/admission`` gate is waiting (:func:`.podkeys.is_waiting`), any other
pod with a GPU fraction holds it. A waiting pod past its ``fracnb.io/max-wait`` is overdue:
the hub gives up on a spawn at its maximum wait and deletes the pod, so one still there means
the hub's queue is not being served (a hub down, or restarted without resuming it).

The GPU units per resource and product (:func:`.gpuunits.gpu_kinds`) are raw units:
extended resources of schedulable nodes against what live pods there request. Group quotas
are configuration, set once at start. Hibernations count by outcome; every outcome starts at
0 so that the first one shows as an increase. ``fracnb_gpu_unused_gpu_hours_total`` adds up,
per profile, the GPU fraction times the time the notebooks reported their GPU unused (known
windows only, between two reports of one session: from the service's start).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from fracnb_spawner.common.podkeys import is_waiting
from fracnb_spawner.queue.demand import queue_lengths, queued_at, slot_kind
from fracnb_spawner.queue.order import wait_deadline
from fracnb_spawner.quota.policy import QuotaPolicy, allocations_from_pods, used_by
from fracnb_spawner.service.gpuunits import GpuKind

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# What a hibernation at a stop came to (issue 19): every idle kernel's variables saved, some of
# them, none (an error or the time limit), or none because they would exceed the size limit.
HIBERNATION_OUTCOMES = ("saved", "partly-saved", "failed", "skipped-over-limit")


class CullMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.culled = Counter(
            "fracnb_culled_servers",
            "Servers stopped by the culler",
            ["reason", "profile"],
            registry=self.registry,
        )
        self.reclaimed = Counter(
            "fracnb_reclaimed_gpu_fraction",
            "GPUs (fractions summed) freed by stopping culled servers",
            ["reason", "profile"],
            registry=self.registry,
        )
        self.idle_hours = Counter(
            "fracnb_idle_gpu_fraction_hours",
            "GPU fraction x hours between a culled server's last activity and its stop",
            ["reason", "profile"],
            registry=self.registry,
        )
        self.cull_failures = Counter(
            "fracnb_cull_failures",
            "Stop requests the hub answered with an error",
            registry=self.registry,
        )
        self.resumed = Counter(
            "fracnb_queue_resumed_spawns",
            "Queued spawns a restarted hub had forgotten, started again by the service (docs/queue.md)",
            registry=self.registry,
        )
        self.warned = Gauge(
            "fracnb_servers_in_warning",
            "Servers within the warning lead of their cull deadline at the last pass",
            registry=self.registry,
        )
        self.pass_duration = Histogram(
            "fracnb_cull_pass_duration_seconds",
            "Duration of one culling pass",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=self.registry,
        )
        self.last_pass = Gauge(
            "fracnb_last_cull_pass_timestamp_seconds",
            "Unix time at which the last culling pass finished",
            registry=self.registry,
        )

        self.queue_length = Gauge(
            "fracnb_queue_length",
            "Spawns waiting for a GPU slot (on fracnb's queue gate or Kueue's admission gate), by the kind of slot"
            " they wait for",
            ["slot_kind"],
            registry=self.registry,
        )
        self.allocated = Gauge(
            "fracnb_allocated_gpus",
            "GPUs (fractions summed) held now by servers of each profile, not counting spawns waiting on either"
            " queue's gate",
            ["profile"],
            registry=self.registry,
        )
        self.group_allocated = Gauge(
            "fracnb_group_allocated_gpus",
            "GPUs (fractions summed) held now by all members of each JupyterHub group, not counting spawns waiting"
            " on either queue's gate",
            ["group"],
            registry=self.registry,
        )
        self.longest_wait = Gauge(
            "fracnb_queue_longest_wait_seconds",
            "Seconds the longest-waiting spawn of each kind of slot has waited so far",
            ["slot_kind"],
            registry=self.registry,
        )
        self.overdue = Gauge(
            "fracnb_queue_overdue_spawns",
            "Spawns still waiting in the queue after their profile's maximum wait (the hub gives up on"
            " them then, so any here means the hub's queue is not being served)",
            ["slot_kind"],
            registry=self.registry,
        )
        self.group_quota = Gauge(
            "fracnb_group_quota_gpus",
            "GPU quota of each JupyterHub group with one (c.FracnbQuotas.group_quotas)",
            ["group"],
            registry=self.registry,
        )
        self.quota_groups: frozenset[str] = frozenset()
        gpu_labels = ["resource", "product"]
        self.gpu_allocatable = Gauge(
            "fracnb_gpu_allocatable_units",
            "Units of each GPU resource that schedulable nodes of each product offer",
            gpu_labels,
            registry=self.registry,
        )
        self.gpu_allocated = Gauge(
            "fracnb_gpu_allocated_units",
            "Units of each GPU resource that live pods on those nodes request",
            gpu_labels,
            registry=self.registry,
        )
        self.gpu_free = Gauge(
            "fracnb_gpu_free_units",
            "Units of each GPU resource on those nodes that no live pod requests",
            gpu_labels,
            registry=self.registry,
        )
        self.hibernations = Counter(
            "fracnb_hibernations",
            "Hibernations at a stop, by outcome: saved (every idle kernel's variables), partly-saved,"
            " failed (nothing saved) or skipped-over-limit (over the size limit, nothing written)",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in HIBERNATION_OUTCOMES:
            self.hibernations.labels(outcome=outcome)
        self.gpu_unused_hours = Counter(
            "fracnb_gpu_unused_gpu_hours",
            "GPUs (fractions summed) x hours that servers of each profile held while their GPU was unused"
            " (known 30 s windows, from the notebooks' session reports)",
            ["profile"],
            registry=self.registry,
        )

    def observe_pods(self, pods: Iterable[Mapping[str, Any]], now: datetime | None = None) -> None:
        """Set the queue and per-profile gauges from a pod listing (labels no longer seen go)."""
        pods = list(pods)
        self.queue_length.clear()
        for kind, length in queue_lengths(pods).items():
            self.queue_length.labels(slot_kind=kind).set(length)
        self._observe_waits(pods, now or datetime.now(timezone.utc))
        self.allocated.clear()
        by_profile: dict[str, Fraction] = {}
        for allocation in allocations_from_pods(pod for pod in pods if not is_waiting(pod)):
            profile = allocation.profile or "unknown"
            by_profile[profile] = by_profile.get(profile, Fraction(0)) + allocation.fraction
        for profile, amount in by_profile.items():
            self.allocated.labels(profile=profile).set(float(amount))

    def _observe_waits(self, pods: list[Mapping[str, Any]], now: datetime) -> None:
        longest: dict[str, float] = {}
        overdue: dict[str, int] = {}
        for pod in pods:
            if not is_waiting(pod):
                continue
            kind = slot_kind(pod)
            since, deadline = queued_at(pod), wait_deadline(pod)
            waited = max((now - since).total_seconds(), 0.0) if since else 0.0
            longest[kind] = max(longest.get(kind, 0.0), waited)
            overdue[kind] = overdue.get(kind, 0) + int(deadline is not None and deadline < now)
        self.longest_wait.clear()
        self.overdue.clear()
        for kind, seconds in longest.items():
            self.longest_wait.labels(slot_kind=kind).set(seconds)
            self.overdue.labels(slot_kind=kind).set(overdue[kind])

    def observe_quotas(self, policy: QuotaPolicy) -> None:
        """The groups' quotas; their use is observed at every pass even while no member has a server."""
        self.group_quota.clear()
        for group, limit in policy.groups.items():
            self.group_quota.labels(group=group).set(float(limit))
        self.quota_groups = frozenset(policy.groups)

    def observe_gpu_kinds(self, kinds: Iterable[GpuKind]) -> None:
        for gauge in (self.gpu_allocatable, self.gpu_allocated, self.gpu_free):
            gauge.clear()
        for kind in kinds:
            labels = {"resource": kind.resource, "product": kind.product}
            self.gpu_allocatable.labels(**labels).set(kind.allocatable)
            self.gpu_allocated.labels(**labels).set(kind.allocated)
            self.gpu_free.labels(**labels).set(kind.free)

    def record_hibernation(self, outcome: str) -> None:
        if outcome not in HIBERNATION_OUTCOMES:
            raise ValueError(f"unknown hibernation outcome {outcome!r}: one of {', '.join(HIBERNATION_OUTCOMES)}")
        self.hibernations.labels(outcome=outcome).inc()

    def record_gpu_unused(self, profile: str, gpu_hours: float) -> None:
        self.gpu_unused_hours.labels(profile=profile or "unknown").inc(max(gpu_hours, 0.0))

    def observe_groups(self, pods: Iterable[Mapping[str, Any]], members: Mapping[str, Iterable[str]]) -> None:
        """Set the per-group gauge: what the members of each group hold (``members``: group -> user names)."""
        held = allocations_from_pods(pod for pod in pods if not is_waiting(pod))
        self.group_allocated.clear()
        for group, users in members.items():
            self.group_allocated.labels(group=group).set(float(used_by(held, users)))

    def record_cull(self, *, reason: str, profile: str, fraction: Fraction, idle_seconds: float) -> None:
        labels = {"reason": reason, "profile": profile or "unknown"}
        self.culled.labels(**labels).inc()
        self.reclaimed.labels(**labels).inc(float(fraction))
        self.idle_hours.labels(**labels).inc(float(fraction) * max(idle_seconds, 0) / 3600)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
