"""Every ``fracnb.io/*`` key a pod carries, and the hub's own pod annotations fracnb reads, in one place.

docs/contract.md says what each means. Keys that are both a label and an annotation hold a
label-safe form in the label and the value as configured in the annotation.
"""

PREFIX = "fracnb.io/"

# Labels (selectable with kubectl -l)
PROFILE_LABEL = PREFIX + "profile"  # label-safe slug; the annotation of the same key keeps it as configured
BACKEND_LABEL = PREFIX + "gpu-backend"
FRACTION_LABEL = PREFIX + "gpu-fraction"  # decimal, e.g. "0.25"
SLOT_KIND_LABEL = PREFIX + "slot-kind"  # pods of one kind compete for the same GPUs (the queue)
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # the kueue engine's pods: the user's LocalQueue

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
# On a ResourceClaim the hub made for a server: the pod it is for (its owner once the pod exists)
CLAIM_POD_ANNOTATION = PREFIX + "pod"

# The scheduling gate of a pod waiting in the GPU queue
QUEUE_GATE = PREFIX + "queue"
# Kueue's gate on a pod waiting for its team's quota (the kueue engine)
KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"
# A pod with either gate holds no GPU yet: the quota line and the admin page say its share is "(waiting)"
WAITING_GATES = frozenset({QUEUE_GATE, KUEUE_ADMISSION_GATE})

# JupyterHub's own annotations on KubeSpawner's pods: whose server a pod is
USERNAME_ANNOTATION = "hub.jupyter.org/username"
SERVERNAME_ANNOTATION = "hub.jupyter.org/servername"
