"""What every GPU-sharing backend shares: the cluster's names (``BackendSettings``), the pod
fields a backend gives a pod (``PodFields``), the resources that give a pod a GPU, and the
framework soft caps of mechanisms that enforce nothing. Each backend's own pod fields are
written beside its record, in :mod:`.table`; :mod:`.contract` adds the ``FRACNB_*`` contract
(docs/contract.md) every pod carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from fracnb_spawner.gpu.mig import MIG_RESOURCE_PREFIX

if TYPE_CHECKING:
    from fracnb_spawner.gpu.plan import GPUPlan

GPU_VISIBILITY_VARIABLES = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "CUDA_DISABLE_CONTROL")
RESERVED_ENV_PREFIX = "FRACNB_"

# What the mechanisms below put in a pod to give it a GPU, in one place: a pod that carries any
# of it outside the ``gpu`` key gets GPUs that no quota counts (see :func:`is_gpu_resource`).
WHOLE_GPU_RESOURCE = "nvidia.com/gpu"
HAMI_CORES_RESOURCE = "nvidia.com/gpucores"
HAMI_MEMORY_RESOURCE = "nvidia.com/gpumem"
HAMI_MEMORY_PERCENT_RESOURCE = "nvidia.com/gpumem-percentage"
# Every name NVIDIA's device plugin (whole, shared, renamed, MIG) and HAMi advertise starts so.
GPU_RESOURCE_PREFIXES = (WHOLE_GPU_RESOURCE, MIG_RESOURCE_PREFIX)
HAMI_GPU_POLICY_ANNOTATION = "hami.io/gpu-scheduler-policy"  # which card of the node: binpack, spread, ...
KAI_FRACTION_ANNOTATION = "gpu-fraction"
# KAI also gives a GPU share for these (docs/spawner.md); fracnb writes only the fraction.
GPU_REQUEST_ANNOTATIONS = (KAI_FRACTION_ANNOTATION, "gpu-memory", "gpu-fraction-num-devices")


@dataclass(frozen=True)
class BackendSettings:
    """Cluster-specific names, from the spawner's traits (whose defaults are the only ones)."""

    time_slicing_resource: str
    mps_resource: str
    hami_scheduler: str
    kai_scheduler: str
    kai_queue_label: str
    kai_queue: str
    soft_cap_ratio: float
    hami_gpu_policy: str = "binpack"
    whole_gpu_resource: str = WHOLE_GPU_RESOURCE  # the device plugin's own name; not configurable
    dra_device_class: str = "gpu.nvidia.com"
    dra_mig_device_class: str = "mig.nvidia.com"
    dra_driver: str = "gpu.nvidia.com"  # the DRA driver: its attributes' domain and opaque config's driver


def is_gpu_resource(name: str, settings: BackendSettings) -> bool:
    """Whether the extended resource ``name`` gives a pod (part of) a GPU under any backend."""
    configured = (settings.whole_gpu_resource, settings.time_slicing_resource, settings.mps_resource)
    return name in configured or name.startswith(GPU_RESOURCE_PREFIXES)


@dataclass(frozen=True)
class PodFields:
    resources: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    scheduler_name: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    # Pod-level parts: ``spec.resourceClaims`` entries, and objects the spawner creates beside the
    # pod (named after it) and deletes at stop; ``container_claims`` go to the notebook container.
    pod_claims: list[dict[str, Any]] = field(default_factory=list)
    container_claims: list[dict[str, Any]] = field(default_factory=list)
    companions: list[dict[str, Any]] = field(default_factory=list)


def soft_caps(plan: GPUPlan, ratio: float) -> dict[str, str]:
    """Framework allocator caps a little under the budget, for mechanisms that enforce nothing.

    They are cooperative (a user can lift them) and don't count the CUDA context, hence
    the margin. TensorFlow has no variable for a cap, only for on-demand growth.
    """
    cap_bytes = int(plan.memory_bytes * ratio)
    device_share = Fraction(cap_bytes, plan.device_memory) if plan.device_memory else Fraction(0)
    share_text = f"{float(device_share):.4f}"
    return {
        "FRACNB_SOFT_CAP_BYTES": str(cap_bytes),
        "PYTORCH_CUDA_ALLOC_CONF": f"per_process_memory_fraction:{share_text}",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": share_text,
        "CUPY_GPU_MEMORY_LIMIT": str(cap_bytes),
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
    }
