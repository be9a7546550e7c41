"""Prometheus metrics of the culler, in a registry of their own.

``fracnb_idle_gpu_fraction_hours_total`` is the reclaim cost: for every server the culler
stops, its GPU fraction times the hours between the last activity the hub recorded for it
(its start if none) and the moment the hub accepted the stop request. It is GPU time held
by servers nobody used, up to when the culler gave it back. Culls under demand (an idle server
stopped sooner because someone waited for its kind of slot) carry ``reason="demand"``.

The gauges of the queue and of allocated GPUs are as of the last culling pass, read from
the pods it listed: a pod still carrying the ``fracnb.io/queue`` gate is waiting, any other
pod with a GPU fraction holds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from fracnb_spawner.queue.demand import is_queued, queue_lengths
from fracnb_spawner.quota.policy import allocations_from_pods, used_by

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


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
            "Spawns waiting in the queue for a GPU slot, by the kind of slot they wait for",
            ["slot_kind"],
            registry=self.registry,
        )
        self.allocated = Gauge(
            "fracnb_allocated_gpus",
            "GPUs (fractions summed) held now by servers of each profile, not counting queued spawns",
            ["profile"],
            registry=self.registry,
        )
        self.group_allocated = Gauge(
            "fracnb_group_allocated_gpus",
            "GPUs (fractions summed) held now by all members of each JupyterHub group, not counting queued spawns",
            ["group"],
            registry=self.registry,
        )

    def observe_pods(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """Set the queue and per-profile gauges from a pod listing (labels no longer seen go)."""
        pods = list(pods)
        self.queue_length.clear()
        for kind, length in queue_lengths(pods).items():
            self.queue_length.labels(slot_kind=kind).set(length)
        self.allocated.clear()
        by_profile: dict[str, Fraction] = {}
        for allocation in allocations_from_pods(pod for pod in pods if not is_queued(pod)):
            profile = allocation.profile or "unknown"
            by_profile[profile] = by_profile.get(profile, Fraction(0)) + allocation.fraction
        for profile, amount in by_profile.items():
            self.allocated.labels(profile=profile).set(float(amount))

    def observe_groups(self, pods: Iterable[Mapping[str, Any]], members: Mapping[str, Iterable[str]]) -> None:
        """Set the per-group gauge: what the members of each group hold (``members``: group -> user names)."""
        held = allocations_from_pods(pod for pod in pods if not is_queued(pod))
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
