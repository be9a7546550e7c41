"""Every ``fracnb.io/*`` key a pod carries, and the hub's own pod annotations fracnb reads, in one place; and
what a pod's scheduling gates mean (:func:`is_waiting`).

docs/contract.md says what each means. Keys that are both a label and an annotation hold a
label-safe form in the label and the value as configured in the annotation.
"""

from collections.abc import Mapping
from typing import Any

PREFIX = "fracnb.io/"

# Labels (selectable with kubectl -l)
PROFILE_LABEL = PREFIX + "profile"  # label-safe slug; the annotation of the same key keeps it as configured
BACKEND_LABEL = PREFIX + "gpu-backend"
FRACTION_LABEL = PREFIX + "gpu-fraction"  # decimal, e.g. "0.25"
SLOT_KIND_LABEL = PREFIX + "slot-kind"  # pods of one kind compete for the same GPUs (the queue)
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # the kueue engine's pods: the user's LocalQueue
BORROWED_LABEL = PREFIX + "borrowed"  # "true": the server runs on a card of a borrowable pool (docs/lending.md)

# Annotations
PROFILE_ANNOTATION = PREFIX + "profile"
FRACTION_ANNOTATION = PREFIX + "gpu-fraction"  # exact, e.g. "1/4"
GPU_MEMORY_ANNOTATION = PREFIX + "gpu-memory-limit"  # bytes of GPU memory the plan gives
CHOICE_ANNOTATION = PREFIX + "choice"
ISOLATION_ANNOTATION = PREFIX + "isolation"
IDLE_TIMEOUT_ANNOTATION = PREFIX + "idle-timeout"
MAX_AGE_ANNOTATION = PREFIX + "max-age"
IDLE_TIMEOUT_UNDER_DEMAND_ANNOTATION = PREFIX + "idle-timeout-under-demand"
GPU_UNUSED_TIMEOUT_ANNOTATION = PREFIX + "gpu-unused-timeout"  # kernels idle, GPU unused: hibernate and stop
GPU_UNUSED_BUSY_TIMEOUT_ANNOTATION = PREFIX + "gpu-unused-busy-timeout"  # a kernel busy, GPU unused: stop
QUEUED_AT_ANNOTATION = PREFIX + "queued-at"
PRIORITY_ANNOTATION = PREFIX + "queue-priority"
MAX_WAIT_ANNOTATION = PREFIX + "max-wait"
BORROWED_FROM_ANNOTATION = PREFIX + "borrowed-from"  # a borrower's own slot kind, whose pool was full
# On a queued pod that may borrow: the borrowable pool's node selector (JSON), for the service's reclaim pass
BORROWABLE_ANNOTATION = PREFIX + "borrowable"
PLACEMENT_ANNOTATION = PREFIX + "placement"  # the card the hub preferred for a share, and why (in words)
BUSY_SINCE_ANNOTATION = PREFIX + "busy-since"  # since when a kernel has run a cell (the fracnb service writes it)
# On a ResourceClaim the hub made for a server: the pod it is for (its owner once the pod exists)
CLAIM_POD_ANNOTATION = PREFIX + "pod"

# The scheduling gate of a pod waiting in the GPU queue
QUEUE_GATE = PREFIX + "queue"
# Kueue's gate on a pod waiting for its team's quota (the kueue engine)
KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"
# A pod with either gate holds no GPU yet (:func:`is_waiting`)
WAITING_GATES = frozenset({QUEUE_GATE, KUEUE_ADMISSION_GATE})

# JupyterHub's own annotations on KubeSpawner's pods: whose server a pod is
USERNAME_ANNOTATION = "hub.jupyter.org/username"
SERVERNAME_ANNOTATION = "hub.jupyter.org/servername"


def is_waiting(pod: Mapping[str, Any] | None) -> bool:
    """Whether the pod waits for a GPU and holds none yet, whichever engine queues it: it carries fracnb's queue
    gate (its turn in the hub's queue) or Kueue's admission gate (its team's quota, with the kueue engine). This
    is what "waiting" means to the service's gauges, ``api/queue`` and admin page, the quota's "(waiting)",
    demand-aware culling, and the service's resume of spawns a restarted hub forgot."""
    return any(gate.get("name") in WAITING_GATES for gate in _gates(pod))


def has_queue_gate(pod: Mapping[str, Any] | None) -> bool:
    """Whether the pod carries fracnb's own queue gate: a place in the hub's queue, which the hub's coordinator
    orders and lifts (builtin engine). Only where Kueue's gate must not count; "waiting" is :func:`is_waiting`."""
    return any(gate.get("name") == QUEUE_GATE for gate in _gates(pod))


def _gates(pod: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return ((pod or {}).get("spec") or {}).get("schedulingGates") or []
