"""The ``dra`` backend: a GPU share as a ResourceClaim of Kubernetes Dynamic Resource Allocation.

Pure functions from a ``GPUPlan`` to manifest parts, for NVIDIA's DRA driver
(kubernetes-sigs/dra-driver-nvidia-gpu). What they rely on, from the driver's source:

- GPUs are devices of the DeviceClass ``gpu.nvidia.com``, MIG devices of ``mig.nvidia.com``;
  attributes live under the driver's domain ``gpu.nvidia.com``: ``productName`` (NVML's name,
  "NVIDIA A100-SXM4-80GB"; GPU Feature Discovery's product label is the same with '-' for
  spaces) and, on MIG devices, ``profile`` ("1g.10gb").
- With the driver's ``ConsumableShares`` gate (``--consumable-shares=memory``) a GPU allows
  multiple allocations and publishes a shareable ``memory`` capacity with a request policy in
  1 MiB steps: a claim asking ``capacity.requests.memory`` gets that much of one GPU
  (Kubernetes' consumable capacity, KEP-5075). The scheduler books it; nothing on the GPU
  enforces it, so such a share is isolation "none" with framework soft caps.
- The opaque ``GpuConfig`` (``resource.nvidia.com/v1beta1``) picks ``sharing.strategy``
  TimeSlicing (``timeSlicingConfig.interval``) or MPS (``mpsConfig.defaultPinnedDeviceMemoryLimit``,
  which the MPS control daemon enforces per client: isolation "enforced"). The driver's kubelet
  plugin refuses MPS while consumable shares are on (docs/spawner.md, "The dra backend").

Each claim is a ResourceClaim named after the pod (:func:`named_for_pod`) that the pod refers to
by ``resourceClaimName``. The hub creates it in the same moment as the pod, then makes the pod its
owner (:mod:`.companions`), rather than a ResourceClaimTemplate that kube-controller-manager's
resourceclaim controller turns into a claim: that controller made a DRA start 3x slower than a
time-sliced one (docs/spawner.md, "The dra backend").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fracnb_spawner.common.podkeys import CLAIM_POD_ANNOTATION
from fracnb_spawner.gpu.backends import BackendSettings, PodFields
from fracnb_spawner.gpu.plan import HARD, NOT_ENFORCED, Isolation

if TYPE_CHECKING:
    from fracnb_spawner.gpu.plan import GPUPlan

RESOURCE_API = "resource.k8s.io/v1"
GPU_CONFIG_API = "resource.nvidia.com/v1beta1"
CLAIM_NAME = "gpu"  # the claim's name in the pod, and the suffix of the ResourceClaim's name
SHARING_STRATEGIES = {"time-slicing": "TimeSlicing", "mps": "MPS"}
SHARING_VALUES = (*SHARING_STRATEGIES, "mig")  # ``sharing: mig``: a fraction as the smallest fitting MIG device
# kube-scheduler's DynamicResources plugin says this whether the devices are taken or none
# matches, so it reads as "may be full"; the form's count from ResourceSlices tells them apart.
FULL_MARKERS = ("cannot allocate all claims",)
MEBIBYTE = 2**20
# kube-scheduler adds this finalizer in a write of its own before it writes an allocation, unless the claim
# has it already (its DynamicResources plugin, PreBind); kube-controller-manager's resourceclaim controller
# removes it once no pod uses the claim, allocated or not. Created with it, a claim spares each start that
# write on kube-scheduler's binding path.
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
MPS_LIMIT = Isolation("enforced", "enforced by the MPS pinned-memory limit")
MOST_PREFERRED = 7  # firstAvailable holds at most 8 subrequests: the last one takes any card
ANY_CARD = "any"


def memory_quantity(size: int) -> str:
    """Bytes as a quantity in the driver's 1 MiB steps, rounded up: "20Gi", "1536Mi"."""
    mebibytes = math.ceil(size / MEBIBYTE)
    return f"{mebibytes // 1024}Gi" if mebibytes % 1024 == 0 else f"{mebibytes}Mi"


def cel_string(text: str) -> str:
    """A CEL string literal for ``text`` (single-quoted, with quotes and backslashes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def product_selector(product: str, driver: str) -> dict[str, Any]:
    """A CEL selector matching the product as GPU Feature Discovery writes it ("NVIDIA-A100-SXM4-80GB")."""
    attribute = f"device.attributes[{cel_string(driver)}].productName"
    return {"cel": {"expression": f"{attribute}.replace(' ', '-') == {cel_string(product)}"}}


def profile_selector(profile: str, driver: str) -> dict[str, Any]:
    return {"cel": {"expression": f"device.attributes[{cel_string(driver)}].profile == {cel_string(profile)}"}}


def gpu_config(plan: GPUPlan, driver: str) -> dict[str, Any] | None:
    """The driver's opaque sharing configuration for ``plan.sharing``; None without one."""
    strategy = SHARING_STRATEGIES.get(plan.sharing or "")
    if strategy is None:
        return None
    sharing: dict[str, Any] = {"strategy": strategy}
    if strategy == "TimeSlicing":
        sharing["timeSlicingConfig"] = {"interval": "Default"}
    else:
        sharing["mpsConfig"] = {"defaultPinnedDeviceMemoryLimit": memory_quantity(plan.memory_bytes)}
    parameters = {"apiVersion": GPU_CONFIG_API, "kind": "GpuConfig", "sharing": sharing}
    return {"opaque": {"driver": driver, "parameters": parameters}}


def device_request(plan: GPUPlan, settings: BackendSettings, *, count: int | None = None) -> dict[str, Any]:
    """The ``exactly`` part of the claim's one request: device class, selectors, capacity or count."""
    selectors = []
    if plan.product:
        selectors.append(product_selector(plan.product, settings.dra_driver))
    if plan.mig_slice is not None:
        selectors.append(profile_selector(plan.mig_slice.profile, settings.dra_driver))
        exactly: dict[str, Any] = {"deviceClassName": settings.dra_mig_device_class}
    else:
        exactly = {"deviceClassName": settings.dra_device_class}
    if count is not None:
        exactly.update(allocationMode="ExactCount", count=count)
    elif plan.mig_slice is None:
        exactly["capacity"] = {"requests": {"memory": memory_quantity(plan.memory_bytes)}}
    if selectors:
        exactly["selectors"] = selectors
    return exactly


def claim_spec(plan: GPUPlan, settings: BackendSettings, *, count: int | None = None) -> dict[str, Any]:
    """The ResourceClaim spec for ``plan`` (``count``: that many whole devices instead of a share)."""
    request = {"name": CLAIM_NAME, "exactly": device_request(plan, settings, count=count)}
    devices: dict[str, Any] = {"requests": [request]}
    config = gpu_config(plan, settings.dra_driver)
    if config is not None:
        devices["config"] = [{"requests": [CLAIM_NAME], **config}]
    return {"devices": devices}


def uuid_selector(uuid: str, driver: str) -> dict[str, Any]:
    """A CEL selector matching one card by the ``uuid`` attribute NVIDIA's driver publishes (it has no index);
    guarded, since a missing attribute would be an error that stops the allocation."""
    attributes = f"device.attributes[{cel_string(driver)}]"
    return {"cel": {"expression": f"has({attributes}.uuid) && {attributes}.uuid == {cel_string(uuid)}"}}


def with_card_preference(spec: dict[str, Any], uuids: Sequence[str], driver: str) -> dict[str, Any]:
    """``spec`` (a share's :func:`claim_spec`) preferring the cards ``uuids`` in order, then any card.

    Its request becomes a ``firstAvailable`` list (Kubernetes' prioritized list, GA in 1.36): a subrequest per
    card (at most 7) with the request's own class, capacity and selectors plus the card's uuid, and a last one
    without, so a full or vanished card never keeps the share from being allocated. A whole-device request
    (``count``) is left as it is. The allocator tries the subrequests in order on each node.
    """
    if not uuids:
        return spec
    requests = []
    for request in spec["devices"]["requests"]:
        exactly = request.get("exactly")
        if exactly is None or "count" in exactly:
            requests.append(request)
            continue
        selectors = exactly.get("selectors", [])
        ranked = [
            {"name": f"card-{rank}", **exactly, "selectors": [*selectors, uuid_selector(uuid, driver)]}
            for rank, uuid in enumerate(list(uuids)[:MOST_PREFERRED])
        ]
        requests.append({"name": request["name"], "firstAvailable": [*ranked, {"name": ANY_CARD, **exactly}]})
    return {**spec, "devices": {**spec["devices"], "requests": requests}}


def _claim_fields(spec: dict[str, Any]) -> PodFields:
    claim = {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaim",
        # named after the pod, labelled as it, and annotated with its name by named_for_pod
        "metadata": {"name": CLAIM_NAME, "finalizers": [DELETE_PROTECTION]},
        "spec": spec,
    }
    return PodFields(
        pod_claims=[{"name": CLAIM_NAME, "resourceClaimName": CLAIM_NAME}],
        container_claims=[{"name": CLAIM_NAME}],
        companions=[claim],
    )


def dra_fields(plan: GPUPlan, settings: BackendSettings) -> PodFields:
    """A share of one GPU: a memory slice, or a MIG device when the plan has a MIG slice."""
    return _claim_fields(claim_spec(plan, settings))


def dra_whole_fields(plan: GPUPlan, settings: BackendSettings) -> PodFields:
    """``count`` whole GPUs as one request of that many devices."""
    return _claim_fields(claim_spec(plan, settings, count=plan.fraction.numerator))


def named_for_pod(fields: PodFields, pod_name: str) -> PodFields:
    """The fields with each companion object (and the pod's reference to it) named ``<pod>-<name>``,
    labelled with the pod's ``fracnb.io/*`` labels and annotated with the pod's name.

    One claim per server, so that stopping the server can delete exactly its own, and a hub
    restarted in between finds it again by the pod's name. The annotation says whose it is before the
    pod owns it (the fracnb service's sweep of claims left without their pod reads it).
    """
    names = {obj["metadata"]["name"]: f"{pod_name}-{obj['metadata']['name']}" for obj in fields.companions}
    companions = [
        {
            **obj,
            "metadata": {
                **obj["metadata"],
                "name": names[obj["metadata"]["name"]],
                "labels": dict(fields.labels),
                "annotations": {CLAIM_POD_ANNOTATION: pod_name},
            },
        }
        for obj in fields.companions
    ]
    pod_claims = []
    for claim in fields.pod_claims:
        name = claim.get("resourceClaimName")
        pod_claims.append({**claim, "resourceClaimName": names[name]} if name in names else claim)
    return PodFields(
        resources=fields.resources, node_selector=fields.node_selector, scheduler_name=fields.scheduler_name,
        labels=fields.labels, annotations=fields.annotations, environment=fields.environment,
        pod_claims=pod_claims, container_claims=fields.container_claims, companions=companions,
    )  # fmt: skip


def companion_names(pod_name: str) -> list[str]:
    """The names of the objects :func:`named_for_pod` gives a pod, to delete at stop."""
    return [f"{pod_name}-{CLAIM_NAME}"]


def isolation_of(plan: GPUPlan) -> Isolation:
    """MIG devices are hardware partitions; an MPS pinned-memory limit is enforced; a memory slice is not."""
    if plan.mig_slice is not None:
        return HARD
    if plan.sharing == "mps":
        return MPS_LIMIT
    return NOT_ENFORCED
