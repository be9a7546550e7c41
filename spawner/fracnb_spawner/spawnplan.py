"""One spawn, resolved once: the ``SpawnPlan`` of a user's choice, and the pod merged from it. Pure.

``FractionalSpawner.load_user_options`` builds the plan from the profile list and the user's
options (:func:`plan_spawn`); every later step reads it: the quota check, the queue, the pod
(:func:`pod_with_plan`, merged into KubeSpawner's own pod as ``kubespawner/objects.py`` builds
pods), the hub's state across restarts (:meth:`SpawnPlan.state`) and the dry run.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from kubernetes_asyncio.client.models import CoreV1ResourceClaim, V1EnvVar, V1PodResourceClaim

from fracnb_spawner.borrowing.decide import Borrow, BorrowSettings, borrow_for
from fracnb_spawner.cluster.slots import Ask, ask_for, slot_kind
from fracnb_spawner.common.podkeys import SLOT_KIND_LABEL
from fracnb_spawner.common.units import format_fraction, parse_fraction
from fracnb_spawner.config.profiles import Selection, cull_policy, selection_overrides
from fracnb_spawner.config.queuekey import queue_max_wait
from fracnb_spawner.culling import CullPolicy
from fracnb_spawner.gpu.backends import GPU_VISIBILITY_VARIABLES, RESERVED_ENV_PREFIX, BackendSettings, PodFields
from fracnb_spawner.gpu.contract import contract_fields
from fracnb_spawner.gpu.dra import named_for_pod
from fracnb_spawner.gpu.plan import CPU_ONLY, GPUPlan
from fracnb_spawner.gpu.resolve import with_enforcement
from fracnb_spawner.gpu.table import backend_fields


@dataclass(frozen=True)
class SpawnContext:
    """The spawner's settings a plan depends on, besides the choice itself."""

    backend: BackendSettings
    gpu_cull: CullPolicy
    cpu_cull: CullPolicy
    node_selector: Mapping[str, str]  # the configured node selector, before any override
    service_url: str = ""  # FRACNB_SERVICE_URL
    kernel_cull_timeout: int = 0  # FRACNB_KERNEL_CULL_IDLE_TIMEOUT of GPU pods; 0: none
    display_timezone: str = ""  # FRACNB_DISPLAY_TIMEZONE: c.FracnbQueue.display_timezone; "": not passed
    borrow: BorrowSettings = field(default_factory=BorrowSettings)  # the borrowable pool (docs/lending.md)


@dataclass(frozen=True)
class SpawnPlan:
    """What one spawn of a choice gets; built once per spawn by :func:`plan_spawn`."""

    profile: str  # the profile's slug
    choice: str  # "size=half,memory=x", "" without options
    gpu: GPUPlan
    cull: CullPolicy
    pod: PodFields  # fracnb's part of the pod: backend fields, the contract, claims and companions
    overrides: tuple[Mapping[str, Any], ...] = ()  # kubespawner_override entries, in KubeSpawner's order
    ask: Ask | None = None  # what the pod competes for (its slot kind), when the hub counts it
    max_wait: float = 0  # seconds a spawn may wait in the GPU queue; 0: it never queues
    selection: Selection | None = field(default=None, compare=False)
    borrow: Borrow | None = field(default=None, compare=False)  # where it may start if its own pool is full

    @property
    def fraction(self) -> Fraction:
        return self.gpu.fraction

    def state(self) -> dict[str, Any]:
        """What the hub keeps across its restarts (``get_state``)."""
        return {
            "profile": self.profile,
            "choice": self.choice,
            "backend": self.gpu.backend,
            "fraction": format_fraction(self.gpu.fraction),
            "memory_bytes": self.gpu.memory_bytes,
        }


def plan_spawn(
    selection: Selection, gpu: GPUPlan, context: SpawnContext, is_gpu_resource: Callable[[str], bool]
) -> SpawnPlan:
    """The plan of ``selection`` (already validated by :func:`.config.profiles.select`), for any pod:
    objects made beside the pod get its name from :func:`for_pod`.

    Raises ``InvalidUserOptionsError`` when the user's free text cannot fill its override.
    """
    overrides = tuple(selection_overrides(selection, is_gpu_resource))
    cull = cull_policy(selection.gpu, selection.cull, context.gpu_cull, context.cpu_cull)
    fields = backend_fields(gpu, context.backend)
    ask = ask_for(gpu, fields, context.backend, merged_node_selector(context.node_selector, overrides))
    display_name = selection.profile.get("display_name")
    contract = contract_fields(
        gpu, profile=selection.slug, choice=selection.choice_text, cull=cull, model=gpu.product,
        display_name=display_name if isinstance(display_name, str) else None,
    )  # fmt: skip
    environment = {**fields.environment, **contract.environment}
    if context.service_url:
        environment["FRACNB_SERVICE_URL"] = context.service_url
    if context.display_timezone:
        # The kernel's times before a browser told the server its own zone (fracnb_meter.displayzone).
        environment["FRACNB_DISPLAY_TIMEZONE"] = context.display_timezone
    if gpu is not CPU_ONLY and context.kernel_cull_timeout:
        # Read by the notebook side's server extension: args would be dropped when the image's
        # own command is used, environment variables never are.
        environment["FRACNB_KERNEL_CULL_IDLE_TIMEOUT"] = str(context.kernel_cull_timeout)
    labels = {**fields.labels, **contract.labels}
    kind = ask.kind if ask is not None else _unqueued_kind(fields)
    if kind:
        labels[SLOT_KIND_LABEL] = kind
    pod = replace(
        fields, labels=labels, annotations={**fields.annotations, **contract.annotations}, environment=environment
    )
    max_wait = queue_max_wait(selection.profile.get("queue")) if ask is not None else 0
    borrow = None
    if context.borrow.enabled and max_wait > 0:
        borrowed = ask_for(gpu, fields, context.backend, context.borrow.node_selector)
        borrow = borrow_for(ask, borrowed, context.borrow, fields.node_selector)
    return SpawnPlan(
        selection.slug, selection.choice_text, gpu, cull, pod, overrides, ask, max_wait,
        selection=selection, borrow=borrow,
    )  # fmt: skip


def for_pod(plan: SpawnPlan, pod_name: str) -> SpawnPlan:
    """``plan`` with the objects made beside the pod (a DRA ResourceClaim) named after ``pod_name``."""
    if not plan.pod.companions:
        return plan
    return replace(plan, pod=named_for_pod(plan.pod, pod_name))


def _unqueued_kind(fields: PodFields) -> str | None:
    """The slot kind of a GPU pod the hub does not count (another scheduler places it), for the label."""
    if not (fields.resources or fields.scheduler_name):
        return None
    return slot_kind(next(iter(fields.resources), fields.scheduler_name or ""), fields.node_selector)


def merged_node_selector(configured: Mapping[str, str], overrides: tuple[Mapping[str, Any], ...]) -> dict | None:
    """The node selector KubeSpawner will give the pod: the configured one with each override merged
    in as its ``_apply_overrides`` merges dicts (a None value removes a key). None when an override
    makes it unknowable before the spawn (a callable)."""
    selector = {key: str(value) for key, value in configured.items()}
    for override in overrides:
        value = override.get("node_selector")
        if value is None:
            continue
        if not isinstance(value, Mapping):
            return None
        for key, item in value.items():
            if item is None:
                selector.pop(key, None)
            else:
                selector[key] = str(item)
    return selector


def plan_from_state(saved: Mapping[str, Any]) -> SpawnPlan:
    """The plan of a running server as the hub kept it (:meth:`SpawnPlan.state`): its choice and GPU plan;
    the pod it made is in the cluster, so the plan's pod fields are left empty."""
    gpu = GPUPlan(
        str(saved.get("backend", "none")), parse_fraction(saved.get("fraction", "0")), saved.get("memory_bytes", 0)
    )
    return SpawnPlan(
        str(saved.get("profile", "")), str(saved.get("choice", "")), with_enforcement(gpu), CullPolicy(), PodFields()
    )


# ---- the pod ---------------------------------------------------------------------------------------


def is_reserved_env(name: str) -> bool:
    """GPU visibility and ``FRACNB_*`` variables: fracnb alone sets them."""
    return name in GPU_VISIBILITY_VARIABLES or name.startswith(RESERVED_ENV_PREFIX)


def pod_with_plan(pod: Any, plan: PodFields) -> Any:
    """KubeSpawner's pod (``V1Pod``) with fracnb's fields merged in; ``pod`` itself is left as it was.

    The GPU resources go to the notebook container's limits and requests, the node selector and
    labels and annotations are merged over KubeSpawner's (fracnb's win), the scheduler is set when
    the backend names one, and the environment keeps KubeSpawner's variables except the reserved
    names, which only fracnb sets. Everything is added literally (no template expansion).
    """
    merged = copy.copy(pod)
    merged.metadata = copy.copy(pod.metadata)
    merged.metadata.labels = {**(pod.metadata.labels or {}), **plan.labels}
    merged.metadata.annotations = {**(pod.metadata.annotations or {}), **plan.annotations}
    merged.spec = spec = copy.copy(pod.spec)
    if plan.node_selector:
        spec.node_selector = {**(pod.spec.node_selector or {}), **plan.node_selector}
    if plan.scheduler_name:
        spec.scheduler_name = plan.scheduler_name
    container = copy.copy(pod.spec.containers[0])
    spec.containers = [container, *pod.spec.containers[1:]]
    kept = [
        var for var in container.env or [] if not is_reserved_env(var["name"] if isinstance(var, dict) else var.name)
    ]
    container.env = kept + [V1EnvVar(name=name, value=value) for name, value in plan.environment.items()]
    if plan.resources or plan.container_claims:
        container.resources = resources = copy.copy(container.resources)
        resources.limits = {**(resources.limits or {}), **plan.resources}
        resources.requests = {**(resources.requests or {}), **plan.resources}
        if plan.container_claims:
            claims = [CoreV1ResourceClaim(name=claim["name"]) for claim in plan.container_claims]
            resources.claims = [*(resources.claims or []), *claims]
    if plan.pod_claims:
        spec.resource_claims = [*(pod.spec.resource_claims or [])] + [
            V1PodResourceClaim(name=claim["name"], resource_claim_name=claim.get("resourceClaimName"))
            for claim in plan.pod_claims
        ]
    return merged
