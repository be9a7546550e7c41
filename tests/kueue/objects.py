"""Kueue objects and pods for the tests on the real Kueue, created through the testbed's REST client."""

from __future__ import annotations

from typing import Any

from fracnb_spawner.queue.kueue.model import MILLI_RESOURCE
from fracnb_testbed.errors import TestbedError
from fracnb_testbed.handle import Testbed
from fracnb_testbed.kueue import API, collection_path

MILLI = MILLI_RESOURCE


def create(testbed: Testbed, manifest: dict[str, Any]) -> dict[str, Any]:
    """POST one Kueue object (namespaced ones into their metadata.namespace)."""
    status, answer = testbed._call("POST", collection_path(manifest), manifest)
    if status >= 300:
        raise TestbedError(f"creating {manifest['kind']} {manifest['metadata']['name']} failed ({status}): {answer}")
    return answer


def flavor(name: str, node_labels: dict[str, str] | None = None) -> dict[str, Any]:
    labels = node_labels or {"nvidia.com/gpu.replicas": "4", "fracnb.io/runner": "kwok"}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": labels},
    }


def cluster_queue(name: str, flavor_name: str, cohort: str, milli: int, borrow: int | None = None) -> dict[str, Any]:
    quota: dict[str, Any] = {"name": MILLI, "nominalQuota": str(milli)}
    if borrow is not None:
        quota["borrowingLimit"] = str(borrow)
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {},
            "queueingStrategy": "StrictFIFO",
            "preemption": {
                "withinClusterQueue": "LowerPriority",
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "LowerPriority"},
            },
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", MILLI],
                    "flavors": [
                        {
                            "name": flavor_name,
                            "resources": [
                                {"name": "cpu", "nominalQuota": "64"},
                                {"name": "memory", "nominalQuota": "256Gi"},
                                quota,
                            ],
                        }
                    ],
                }
            ],
        },
    }


def local_queue(namespace: str, name: str, cluster_queue_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


def gpu_pod(name: str, queue: str | None, *, slots: int = 1, priority_class: str | None = None) -> dict[str, Any]:
    """A pod asking for ``slots`` quarter-GPU slots (nvidia.com/gpu.shared), on KWOK nodes only."""
    labels = {}
    if queue:
        labels["kueue.x-k8s.io/queue-name"] = queue
    if priority_class:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    requests = {"cpu": "100m", "memory": "128Mi"}
    limits = {}
    if slots:
        limits["nvidia.com/gpu.shared"] = str(slots)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeSelector": {"fracnb.io/runner": "kwok"},
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "x", "resources": {"requests": requests, "limits": limits}}],
        },
    }


def workload_of(testbed: Testbed, namespace: str, pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's Workload, found by Kueue's job-uid label."""
    uid = pod["metadata"]["uid"]
    items = testbed.get(f"{API}/namespaces/{namespace}/workloads?labelSelector=kueue.x-k8s.io/job-uid%3D{uid}")["items"]
    return items[0] if items else None


def condition(workload: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for entry in (workload or {}).get("status", {}).get("conditions", []):
        if entry["type"] == kind:
            return entry
    return None


def gates(pod: dict[str, Any] | None) -> list[str]:
    return [gate["name"] for gate in ((pod or {}).get("spec", {}).get("schedulingGates") or [])]


def ensure_priority_class(testbed: Testbed, name: str, value: int) -> None:
    """A WorkloadPriorityClass (cluster-scoped, shared by the session's tests). Kueue v0.17 makes no
    Workload for a pod naming a class that does not exist, so the pod stays gated."""
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
    }
    status, answer = testbed._call("POST", f"{API}/workloadpriorityclasses", body)
    if status >= 300 and status != 409:
        raise TestbedError(f"creating WorkloadPriorityClass {name} failed ({status}): {answer}")
