"""The GPU units the nodes offer, per extended resource and product, for the service's unit gauges
(:meth:`.metrics.CullMetrics.observe_gpu_kinds`). Pure.

The admin page counts per slot kind of the hub's choices, in GPU shares (:mod:`.choices`); the gauges
count raw units of every GPU resource, as Kubernetes does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fracnb_spawner.cluster.nodes import requested_by_node

PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True)
class GpuKind:
    """One extended GPU resource on nodes of one product: units allocatable, allocated, free."""

    resource: str
    product: str
    nodes: int
    allocatable: int
    allocated: int

    @property
    def free(self) -> int:
        return max(self.allocatable - self.allocated, 0)


def gpu_kinds(
    nodes: Iterable[Mapping[str, Any]], pods: list[Mapping[str, Any]], is_gpu: Callable[[str], bool]
) -> list[GpuKind]:
    """Every GPU resource the nodes offer, per product, with what live pods bound there request."""
    totals: dict[tuple[str, str], list[int]] = {}
    used_cache: dict[str, dict[str, int]] = {}
    for node in nodes:
        metadata = node.get("metadata") or {}
        if (node.get("spec") or {}).get("unschedulable"):
            continue
        product = (metadata.get("labels") or {}).get(PRODUCT_LABEL, "unknown product")
        for resource, amount in ((node.get("status") or {}).get("allocatable") or {}).items():
            if not is_gpu(resource):
                continue
            try:
                units = int(str(amount))
            except ValueError:
                continue
            if units <= 0:
                continue
            if resource not in used_cache:
                used_cache[resource] = requested_by_node(pods, resource)
            entry = totals.setdefault((resource, product), [0, 0, 0])
            entry[0] += 1
            entry[1] += units
            entry[2] += used_cache[resource].get(metadata.get("name", ""), 0)
    return [
        GpuKind(resource, product, n, total, used) for (resource, product), (n, total, used) in sorted(totals.items())
    ]
