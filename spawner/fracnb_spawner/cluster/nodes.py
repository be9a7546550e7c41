"""Free capacity per spawn-form choice, from node allocatable minus the requests of pods on the node."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

_DONE_PHASES = ("Succeeded", "Failed")
# Notebooks run at the default priority 0 (Zero-to-JupyterHub's too, with or without its
# podPriority). A pod below it (a batch queue's PriorityClass, z2jh's user placeholders at -10)
# is one kube-scheduler preempts to place a notebook, so its units count as free for one.
NOTEBOOK_PRIORITY = 0


def preemptible(pod: Mapping[str, Any]) -> bool:
    """Whether kube-scheduler would preempt ``pod`` for a notebook (its ``spec.priority`` is lower)."""
    priority = (pod.get("spec") or {}).get("priority")
    return isinstance(priority, int) and priority < NOTEBOOK_PRIORITY


def _quantity(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def requested_by_node(pods: Iterable[Mapping[str, Any]], resource: str) -> dict[str, int]:
    """Units of ``resource`` requested by the live pods bound to each node."""
    used: dict[str, int] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in _DONE_PHASES:
            continue
        for container in (pod.get("spec") or {}).get("containers") or []:
            resources = container.get("resources") or {}
            amount = (resources.get("requests") or {}).get(resource) or (resources.get("limits") or {}).get(resource)
            if amount is not None:
                used[node] = used.get(node, 0) + _quantity(amount)
    return used


def free_units(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], resource: str, selector: Mapping[str, str]
) -> int:
    """Free units of ``resource`` on schedulable nodes whose labels match ``selector``."""
    return sum(free_by_node(nodes, pods, resource, selector))


def free_by_node(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    resource: str,
    selector: Mapping[str, str],
    *,
    preempting: bool = True,
) -> Iterator[int]:
    """Free units of ``resource`` on each schedulable node whose labels match ``selector``, for a notebook:
    the units of pods it would preempt count as free (``preempting`` False: every pod's units count as used,
    for a start that must not preempt, a borrowed card)."""
    used = requested_by_node((pod for pod in pods if not (preempting and preemptible(pod))), resource)
    for node in nodes:
        metadata = node.get("metadata") or {}
        labels = metadata.get("labels") or {}
        if (node.get("spec") or {}).get("unschedulable") or any(labels.get(k) != v for k, v in selector.items()):
            continue
        allocatable = _quantity(((node.get("status") or {}).get("allocatable") or {}).get(resource, 0))
        yield max(0, allocatable - used.get(metadata.get("name", ""), 0))


def largest_allocatable(nodes: Iterable[Mapping[str, Any]], resource: str, selector: Mapping[str, str]) -> int:
    """The most units of ``resource`` any one node matching ``selector`` offers, used or not.

    Cordoned nodes count: they exist and may take pods again. 0 means no node of the cluster
    could ever run a pod asking for ``resource`` with this selector.
    """
    largest = 0
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if all(labels.get(k) == v for k, v in selector.items()):
            allocatable = ((node.get("status") or {}).get("allocatable") or {}).get(resource, 0)
            largest = max(largest, _quantity(allocatable))
    return largest


def gpu_memory_by_product(nodes: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """GPU memory per product from GFD labels (``nvidia.com/gpu.memory`` is in MiB)."""
    memory: dict[str, int] = {}
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        product, mib = labels.get("nvidia.com/gpu.product"), labels.get("nvidia.com/gpu.memory")
        if product and mib and mib.isdigit():
            memory[product.removesuffix("-SHARED")] = int(mib) * 2**20
    return memory
