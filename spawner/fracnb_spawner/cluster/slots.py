"""What a queued spawn competes for, and whether it fits now: one rule per way of counting capacity. Pure.

A GPU spawn that may queue carries an *ask*: its slot kind (the ``fracnb.io/slot-kind`` label; pods
with the same kind compete for the same GPUs) and what one server takes. The backend table's record
says how a backend's plans are counted (its ``counted_by`` tag, mapped to an ask by :func:`ask_for`); the
queue only calls the ask's
methods, whatever the backend:

- :class:`ResourceAsk`, for device-plugin backends: ``units`` of an extended resource on nodes
  matching a node selector. Its kind is the resource plus the selector's values; its free capacity
  is node allocatable minus the requests of pods bound there (:mod:`.nodes`).
- :class:`DraAsk`, for the ``dra`` backend: a memory slice, a MIG device or whole GPUs of a device
  class and product. Its kind is the device class, product and MIG profile, not the slice size:
  a 20 GiB and a 40 GiB waiter for the same GPUs are one queue, and each one's fit is decided by
  capacity, device by device (ResourceSlices minus allocated claims, :mod:`.devices`).

A :class:`Ledger` is the free capacity of one kind, from which the queue takes, in order, what the
spawns already on their way to the scheduler hold and then what each waiter asks, until one does not
fit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from fracnb_spawner.cluster.devices import (
    DraWant,
    device_ledger,
    free_servers,
    schedulable_nodes,
    take_devices,
    want_for,
)
from fracnb_spawner.cluster.nodes import free_by_node, largest_allocatable
from fracnb_spawner.common.labels import label_value
from fracnb_spawner.common.podkeys import GPU_MEMORY_ANNOTATION
from fracnb_spawner.gpu.table import backend_named

if TYPE_CHECKING:
    from fracnb_spawner.gpu.backends import BackendSettings, PodFields
    from fracnb_spawner.gpu.plan import GPUPlan

MEBIBYTE = 2**20
COUNT_LIMIT = 10_000  # the most servers a ledger counts for the spawn form ("N free now")


@dataclass(frozen=True)
class Cluster:
    """What the queue reads of the cluster: trimmed nodes and pods (:mod:`.view`), and for
    DRA asks, trimmed ResourceSlices and allocated claims (:mod:`.devices`)."""

    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    slices: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)


class Ledger(Protocol):
    def take(self, ask: Any) -> bool:
        """Book one server of ``ask`` if it fits now; whether it did."""


class Ask(Protocol):
    kind: str
    needs_devices: bool  # the cluster's ResourceSlices and claims must be read

    def could_ever_fit(self, cluster: Cluster) -> bool: ...
    def ledger(self, cluster: Cluster) -> Ledger: ...
    def placed(self, pod: Mapping[str, Any], cluster: Cluster) -> bool: ...
    def of_pod(self, pod: Mapping[str, Any]) -> Ask: ...


# ---- device plugins: an extended resource ---------------------------------------------------------


def slot_kind(resource: str, node_selector: Mapping[str, str]) -> str:
    """The label value naming the slots a pod competes for: its GPU resource and its node selector's values.

    ``nvidia.com/gpu.shared`` on time-sliced nodes with 4 replicas ->
    ``nvidia.com-gpu.shared.4.time-slicing`` (values in the order of their keys); a product, or an
    admin's own selector such as a node pool, adds its value, since pods that differ in any of
    them can land on different nodes. Too long or odd text gets :func:`labels.label_value`'s
    hashed form.
    """
    parts = [resource.replace("/", "-")] + [str(node_selector[key]) for key in sorted(node_selector)]
    return label_value(".".join(parts))


@dataclass
class UnitLedger:
    """Free units of one extended resource on each matching node.

    A server takes all its units from one node (a pod cannot span nodes), so two GPUs free on
    two different nodes do not make room for a two-GPU server. Of the nodes that can take it,
    the one with the fewest free units (best fit), which leaves the larger gaps for larger asks.
    """

    free: list[int]

    def take(self, ask: ResourceAsk) -> bool:
        fitting = [index for index, left in enumerate(self.free) if left >= ask.units]
        if not fitting:
            return False
        best = min(fitting, key=lambda index: self.free[index])
        self.free[best] -= ask.units
        return True


@dataclass(frozen=True)
class ResourceAsk:
    """``units`` of the extended ``resource`` on a node matching ``selector``."""

    kind: str
    resource: str
    selector: Mapping[str, str]
    units: int
    needs_devices: bool = False

    def could_ever_fit(self, cluster: Cluster) -> bool:
        return largest_allocatable(cluster.nodes, self.resource, self.selector) >= self.units

    def ledger(self, cluster: Cluster) -> UnitLedger:
        return UnitLedger(list(free_by_node(cluster.nodes, cluster.pods, self.resource, self.selector)))

    def placed(self, pod: Mapping[str, Any], cluster: Cluster) -> bool:
        """Bound to a node: the node's free count already leaves its units out."""
        return bool(pod["spec"].get("nodeName"))

    def of_pod(self, pod: Mapping[str, Any]) -> ResourceAsk:
        return replace(self, units=pod_units(pod, self.resource))


def pod_units(pod: Mapping[str, Any], resource: str) -> int:
    """Units of ``resource`` the pod's containers request (or limit)."""
    total = 0
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        text = str(
            (resources.get("requests") or {}).get(resource) or (resources.get("limits") or {}).get(resource) or 0
        )
        total += int(text) if text.isdigit() else 0
    return total


def resource_ask(
    plan: GPUPlan, fields: PodFields, settings: BackendSettings, node_selector: Mapping[str, str] | None
) -> ResourceAsk | None:
    """The ask of a device-plugin plan; None without a GPU resource, with another scheduler, or when the
    node selector cannot be known before the spawn (``node_selector`` None)."""
    if not fields.resources or fields.scheduler_name is not None or node_selector is None:
        return None
    resource, amount = next(iter(fields.resources.items()))
    selector = {**node_selector, **fields.node_selector}
    return ResourceAsk(slot_kind(resource, selector), resource, selector, int(amount))


# ---- DRA: devices of ResourceSlices --------------------------------------------------------------


def dra_slot_kind(device_class: str, want: DraWant) -> str:
    """``gpu.nvidia.com.NVIDIA-A100-SXM4-80GB``, ``mig.nvidia.com.NVIDIA-A100-SXM4-80GB.1g.10gb``;
    ``any`` stands for a choice that takes any product; the values of the pod's node selector follow,
    in the order of their keys, as for device plugins. The slice size is not part of the kind."""
    parts = [device_class, want.product or "any"] + ([want.profile] if want.profile else [])
    parts += [value for _key, value in want.node_selector]
    return label_value(".".join(parts))


@dataclass
class DeviceLedger:
    """Free capacity of each device a kind can use (:func:`.devices.device_ledger`)."""

    devices: list[dict[str, Any]]

    def take(self, ask: DraAsk) -> bool:
        return take_devices(self.devices, ask.want)


@dataclass(frozen=True)
class DraAsk:
    """A DRA claim of ``want``: a memory slice, a MIG device or ``count`` whole GPUs."""

    kind: str
    want: DraWant
    needs_devices: bool = True

    def could_ever_fit(self, cluster: Cluster) -> bool:
        return free_servers(cluster.slices, [], self.want, cluster.nodes or None) > 0

    def ledger(self, cluster: Cluster) -> DeviceLedger:
        return DeviceLedger(device_ledger(cluster.slices, cluster.claims, self.want, schedulable_nodes(cluster.nodes)))

    def placed(self, pod: Mapping[str, Any], cluster: Cluster) -> bool:
        """Its claim is allocated: the devices' free capacity already leaves it out. A pod bound to a
        node whose claim the view has not seen allocated yet still counts as on its way."""
        metadata = pod.get("metadata") or {}
        owner = (metadata.get("namespace", ""), metadata.get("name", ""))
        return any(claim.get("owner") == owner for claim in cluster.claims)

    def of_pod(self, pod: Mapping[str, Any]) -> DraAsk:
        """A pod of this kind the hub is not waiting on (a restart): its slice size from its annotation."""
        if self.want.memory is None:
            return self
        text = str(((pod.get("metadata") or {}).get("annotations") or {}).get(GPU_MEMORY_ANNOTATION, ""))
        if not text.isdigit() or int(text) == 0:
            return self
        return replace(self, want=replace(self.want, memory=-(-int(text) // MEBIBYTE) * MEBIBYTE))


def dra_ask(
    plan: GPUPlan, fields: PodFields, settings: BackendSettings, node_selector: Mapping[str, str] | None
) -> DraAsk | None:
    """The ask of a dra plan (its claim); None for plans the dra backend does not place."""
    want = want_for(plan, settings)
    if want is None:
        return None
    if node_selector:
        want = replace(want, node_selector=tuple(sorted({**node_selector, **fields.node_selector}.items())))
    device_class = settings.dra_mig_device_class if want.device_type == "mig" else settings.dra_device_class
    return DraAsk(dra_slot_kind(device_class, want), want)


AskFor = Callable[["GPUPlan", "PodFields", "BackendSettings", "Mapping[str, str] | None"], "Ask | None"]
ASK_FOR: dict[str, AskFor] = {"extended-resource": resource_ask, "dra": dra_ask}


def ask_for(
    plan: GPUPlan, fields: PodFields, settings: BackendSettings, node_selector: Mapping[str, str] | None
) -> Ask | None:
    """What one server of ``plan`` competes for, as its backend counts capacity; None when the hub does
    not count it (another scheduler places it) or its node selector cannot be known before the spawn."""
    make = ASK_FOR.get(backend_named(plan.scheduler_backend or plan.backend).counted_by)
    return None if make is None else make(plan, fields, settings, node_selector)


# ---- counting ------------------------------------------------------------------------------------


def servers_free(ask: Ask, cluster: Cluster, in_flight: Iterable[Ask] = ()) -> int:
    """How many more servers of ``ask`` fit now, after what is on its way to the scheduler."""
    ledger = ask.ledger(cluster)
    for other in in_flight:
        ledger.take(other)
    count = 0
    while count < COUNT_LIMIT and ledger.take(ask):
        count += 1
    return count
