"""Prometheus metrics of the culler, in a registry of their own.

``fracnb_idle_gpu_fraction_hours_total`` is the reclaim cost: for every server the culler
stops, its GPU fraction times the hours between the last activity the hub recorded for it
(its start if none) and the moment the hub accepted the stop request. It is GPU time held
by servers nobody used, up to when the culler gave it back.
"""

from __future__ import annotations

from fractions import Fraction

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

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

    def record_cull(self, *, reason: str, profile: str, fraction: Fraction, idle_seconds: float) -> None:
        labels = {"reason": reason, "profile": profile or "unknown"}
        self.culled.labels(**labels).inc()
        self.reclaimed.labels(**labels).inc(float(fraction))
        self.idle_hours.labels(**labels).inc(float(fraction) * max(idle_seconds, 0) / 3600)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
