"""Free capacity for ``dra`` choices: ResourceSlices minus what allocated claims consume.

The spawn form shows, per choice, how many more servers of it the cluster's DRA devices could
take now, as it does from node allocatable for the device plugins. Devices are matched the way
NVIDIA's DeviceClasses select them (the driver's name and its ``type`` attribute: ``gpu`` or
``mig``), then by product (``productName`` written as GPU Feature Discovery labels it) and MIG
profile; other CEL in a cluster's own DeviceClasses is not evaluated. A memory slice fits where
a device's ``memory`` capacity less the ``consumedCapacity`` of the claims allocated on it holds
the request; a MIG device or a whole GPU is free when no claim holds it.

The functions here are pure; they read ResourceSlices and ResourceClaims as the API returns them
(dicts). :mod:`.draview` keeps both current with one watch each per hub.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fracnb_spawner.common.podkeys import CLAIM_POD_ANNOTATION
from fracnb_spawner.common.units import QuantityError, parse_bytes
from fracnb_spawner.gpu.dra import MEBIBYTE

if TYPE_CHECKING:
    from fracnb_spawner.gpu.backends import BackendSettings
    from fracnb_spawner.gpu.plan import GPUPlan

default_log = logging.getLogger("fracnb.dra")
DeviceKey = tuple[str, str, str]  # driver, pool, device


@dataclass(frozen=True)
class DraWant:
    """What one server of a choice asks of the devices."""

    driver: str
    device_type: str  # "gpu" or "mig"
    product: str | None = None  # as GFD writes it: NVIDIA-A100-SXM4-80GB
    profile: str | None = None  # MIG profile
    memory: int | None = None  # bytes of one GPU's memory (a slice); None: whole devices
    count: int = 1  # whole devices per server
    node_selector: tuple[tuple[str, str], ...] = ()  # the pod's: only devices of nodes with these labels


def _bytes(value: object) -> int:
    try:
        return parse_bytes(value)
    except QuantityError:
        return 0


def _text(attributes: Mapping[str, Any], name: str) -> str:
    return str((attributes.get(name) or {}).get("string", ""))


def _name_of(obj: Mapping[str, Any]) -> dict[str, str]:
    metadata = obj.get("metadata") or {}
    return {"name": metadata.get("name", ""), "namespace": metadata.get("namespace", "")}


def want_for(plan: GPUPlan, settings: BackendSettings) -> DraWant | None:
    """What a server of ``plan`` asks of the devices; None for plans the dra backend does not place."""
    if plan.backend == "whole" and plan.scheduler_backend == "dra":
        return DraWant(settings.dra_driver, "gpu", plan.product, count=plan.fraction.numerator)
    if plan.backend != "dra":
        return None
    if plan.mig_slice is not None:
        return DraWant(settings.dra_driver, "mig", plan.product, profile=plan.mig_slice.profile)
    # The claim asks whole MiB (dra.memory_quantity rounds up): count with the same amount.
    return DraWant(settings.dra_driver, "gpu", plan.product, memory=-(-plan.memory_bytes // MEBIBYTE) * MEBIBYTE)


def trim_slice(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """A ResourceSlice reduced to what :func:`free_servers` reads."""
    spec = obj.get("spec") or {}
    devices = []
    for device in spec.get("devices") or []:
        attributes = device.get("attributes") or {}
        devices.append({
            "name": device.get("name", ""),
            "type": _text(attributes, "type"),
            "product": _text(attributes, "productName").replace(" ", "-"),
            "profile": _text(attributes, "profile"),
            "uuid": _text(attributes, "uuid"),  # a claim may prefer a card by it (fracnb_spawner.placement)
            "memory": _bytes(((device.get("capacity") or {}).get("memory") or {}).get("value", 0)),
            "shared": bool(device.get("allowMultipleAllocations")),
        })  # fmt: skip
    pool = (spec.get("pool") or {}).get("name", "")
    node = spec.get("nodeName") or None  # None: devices not local to one node (allNodes, a node selector)
    return {"metadata": _name_of(obj), "driver": spec.get("driver", ""), "pool": pool, "node": node, "devices": devices}


def trim_claim(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """An allocated ResourceClaim reduced to the devices it holds and the memory it consumes; None if unallocated."""
    allocation = (obj.get("status") or {}).get("allocation") or {}
    results = [
        {
            "key": (result.get("driver", ""), result.get("pool", ""), result.get("device", "")),
            "memory": _bytes((result.get("consumedCapacity") or {}).get("memory", 0)),
        }
        for result in (allocation.get("devices") or {}).get("results") or []
    ]
    if not results:
        return None
    metadata = _name_of(obj)
    owners = [ref for ref in (obj.get("metadata") or {}).get("ownerReferences") or [] if ref.get("kind") == "Pod"]
    # The pod kube-scheduler reserved it for, until the hub's patch makes that pod its owner.
    users = [ref for ref in (obj.get("status") or {}).get("reservedFor") or [] if ref.get("resource") == "pods"]
    # (namespace, pod) of the pod the claim is for: the queue reads which pods hold devices.
    holder = (owners or users or [{}])[0].get("name")
    owner = (metadata["namespace"], holder) if holder else None
    return {"metadata": metadata, "results": results, "owner": owner}


def whole_device_classes(obj: Mapping[str, Any]) -> list[str]:
    """The device classes a claim asks whole devices of: its ``exactly`` requests without a capacity request (as
    fracnb's own whole-card claims ask; a request with one asks a share)."""
    requests = ((obj.get("spec") or {}).get("devices") or {}).get("requests") or []
    exact = [request.get("exactly") or {} for request in requests]
    return [ask["deviceClassName"] for ask in exact if ask.get("deviceClassName") and not ask.get("capacity")]


def trim_viewed_claim(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """A claim as the hub's DRA view keeps it: an allocated one as :func:`trim_claim`; an unallocated one made for a
    pod (from its template: the pod owns it) that asks whole devices, as waiting for them (``waits_for``: their
    device classes; no results, no owner: it holds nothing yet), for placement (:mod:`fracnb_spawner.placement`);
    any other None. fracnb's own claims wait as their pods do (their whole-card starts), so they are left out."""
    allocated = trim_claim(obj)
    if allocated is not None:
        return allocated
    metadata = obj.get("metadata") or {}
    owners = [ref for ref in metadata.get("ownerReferences") or [] if ref.get("kind") == "Pod"]
    fracnbs = CLAIM_POD_ANNOTATION in (metadata.get("annotations") or {})  # its start is read from its pod
    classes = whole_device_classes(obj) if owners and not fracnbs else []
    if not classes:
        return None
    return {"metadata": _name_of(obj), "results": [], "owner": None, "waits_for": classes}


def _used(claims: Iterable[Mapping[str, Any]]) -> dict[DeviceKey, tuple[int, int]]:
    """Per device: (claims holding it, memory they consume)."""
    used: dict[DeviceKey, tuple[int, int]] = {}
    for claim in claims:
        for result in claim["results"]:
            holders, memory = used.get(tuple(result["key"]), (0, 0))
            used[tuple(result["key"])] = (holders + 1, memory + result["memory"])
    return used


def _matches(device: Mapping[str, Any], want: DraWant) -> bool:
    return (
        device["type"] == want.device_type
        and (want.product is None or device["product"] == want.product)
        and (want.profile is None or device["profile"] == want.profile)
    )


def schedulable_nodes(nodes: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]] | None:
    """The nodes new pods may go to (not cordoned); None when there are none to read (every slice counts)."""
    nodes = list(nodes)
    return [node for node in nodes if not (node.get("spec") or {}).get("unschedulable")] if nodes else None


def _node_allowed(want: DraWant, nodes: Iterable[Mapping[str, Any]] | None) -> Callable[[str | None], bool]:
    """Whether a slice's node may run the pod: its labels match the pod's node selector.

    Without a node selector, without the nodes (the hub cannot read them), or for devices not local
    to one node, every slice counts.
    """
    if not want.node_selector or nodes is None:
        return lambda node: True
    matching = {
        (node.get("metadata") or {}).get("name")
        for node in nodes
        if all(((node.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in want.node_selector)
    }
    return lambda node: node is None or node in matching


def device_ledger(
    slices: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    want: DraWant,
    nodes: Iterable[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The devices ``want`` could use, each with its pool, the memory left and how many claims hold it."""
    used = _used(claims)
    allowed = _node_allowed(want, nodes)
    devices = []
    for slice_ in slices:
        if slice_["driver"] != want.driver or not allowed(slice_.get("node")):
            continue
        for device in slice_["devices"]:
            if _matches(device, want):
                holders, consumed = used.get((slice_["driver"], slice_["pool"], device["name"]), (0, 0))
                devices.append({
                    "name": device["name"], "pool": slice_["pool"], "shared": device["shared"],
                    "free": max(0, device["memory"] - consumed), "holders": holders,
                })  # fmt: skip
    return devices


def take_devices(devices: list[dict[str, Any]], want: DraWant) -> bool:
    """Book one server of ``want`` on ``devices`` (a :func:`device_ledger`) if it fits; whether it did.

    A memory slice takes the first shareable device with room, as the scheduler tries devices in
    order; a MIG device or whole GPUs take devices no claim holds, all from one pool (one node).
    """
    if want.memory is not None:
        for device in devices:
            if device["shared"] and device["free"] >= want.memory:
                device["free"] -= want.memory
                device["holders"] += 1
                return True
    by_pool: dict[str, list[dict[str, Any]]] = {}
    for device in devices:
        if device["holders"] == 0 and not (want.memory is not None and device["shared"]):
            by_pool.setdefault(device["pool"], []).append(device)
    for untouched in by_pool.values():
        if len(untouched) >= want.count:
            for device in untouched[: want.count]:
                device["holders"] = 1
            return True
    return False


def free_servers(
    slices: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    want: DraWant,
    nodes: Iterable[Mapping[str, Any]] | None = None,
) -> int:
    """How many more servers asking ``want`` the devices could take now (on ``nodes`` matching its selector)."""
    devices = device_ledger(slices, claims, want, nodes)
    free = 0
    while take_devices(devices, want):
        free += 1
    return free
