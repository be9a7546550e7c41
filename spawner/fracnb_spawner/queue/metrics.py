"""The GPU queue's Prometheus metrics, in the default registry that JupyterHub serves at /hub/metrics."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

WAIT_SECONDS = Histogram(
    "fracnb_queue_wait_seconds",
    "Seconds GPU spawns waited in the fracnb queue before their turn came",
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, float("inf")),
)
GAVE_UP = Counter(
    "fracnb_queue_gave_up_total",
    "GPU spawns that left the fracnb queue before their turn: reason max-wait (waited the profile's"
    " maximum) or cancelled (stopped by the user or an admin)",
    ["reason"],
)
