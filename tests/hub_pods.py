"""Literal singleuser pods as FractionalSpawner leaves them in the cluster: running, or queued (gated)
for a slot kind, with the annotations the queue, the quota and the culler read (docs/contract.md)."""

from __future__ import annotations

from datetime import datetime, timezone

T0 = datetime(2026, 11, 23, 14, 0, tzinfo=timezone.utc)
SHARED = "nvidia.com-gpu.shared"
MIG = "nvidia.com-mig-1g.10gb.a100"


def pod(user, server="", *, kind=SHARED, queued=False, queued_at=None, priority=None, fraction="1/4", **extra):
    annotations = {
        "hub.jupyter.org/username": user,
        "hub.jupyter.org/servername": server,
        "fracnb.io/gpu-fraction": fraction,
        "fracnb.io/profile": "quarter",
        **extra,
    }
    if queued_at is not None:
        annotations["fracnb.io/queued-at"] = queued_at
    if priority is not None:
        annotations["fracnb.io/queue-priority"] = priority
    labels = {"component": "singleuser-server", **({"fracnb.io/slot-kind": kind} if kind else {})}
    spec = {"containers": [{"name": "notebook"}]}
    if queued:
        spec["schedulingGates"] = [{"name": "fracnb.io/queue"}]
    return {
        "metadata": {
            "name": f"jupyter-{user}",
            "namespace": "jhub",
            "annotations": annotations,
            "labels": labels,
            "creationTimestamp": "2026-11-23T13:00:00Z",
        },
        "spec": spec,
        "status": {"phase": "Pending" if queued else "Running"},
    }
