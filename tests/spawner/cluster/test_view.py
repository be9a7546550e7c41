"""The hub-wide cluster view's pure parts: what it keeps of nodes and pods, and how events apply."""

from __future__ import annotations

from fracnb_spawner.cluster.nodes import free_units
from fracnb_spawner.cluster.view import apply_event, trim_node, trim_pod

NODE = {
    "metadata": {"name": "gpu-1", "labels": {"pool": "gpu"}, "annotations": {"big": "x" * 1000}, "uid": "u1"},
    "spec": {"podCIDR": "10.0.0.0/24", "taints": []},
    "status": {
        "allocatable": {"cpu": "8", "nvidia.com/gpu.shared": "8"},
        "conditions": [{"type": "Ready", "status": "True"}],
        "images": [{"names": ["a"], "sizeBytes": 1}],
    },
}


def gpu_pod(name: str, node: str | None, amount: str = "2", phase: str = "Running") -> dict:
    spec: dict = {
        "containers": [
            {"name": "sidecar", "resources": {"requests": {"cpu": "100m"}}},
            {
                "name": "notebook",
                "image": "example.invalid/notebook",
                "env": [{"name": "SECRET", "value": "s"}],
                "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu.shared": amount},
                    "limits": {"nvidia.com/gpu.shared": amount},
                },
            },
        ]
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": "ns", "annotations": {"a": "b"}, "labels": {"component": "x"}},
        "spec": spec,
        "status": {"phase": phase, "podIP": "10.0.0.5"},
    }


def test_a_node_keeps_what_free_units_reads() -> None:
    assert trim_node(NODE) == {
        "metadata": {"name": "gpu-1", "labels": {"pool": "gpu"}},
        "spec": {"unschedulable": False},
        "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu.shared": "8"}},
    }


def test_a_cordoned_node_stays_unschedulable() -> None:
    assert trim_node({**NODE, "spec": {"unschedulable": True}})["spec"] == {"unschedulable": True}


def test_a_bound_gpu_pod_keeps_only_its_extended_resources() -> None:
    assert trim_pod(gpu_pod("p", "gpu-1")) == {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "nodeName": "gpu-1",
            "containers": [
                {"resources": {"requests": {"nvidia.com/gpu.shared": "2"}, "limits": {"nvidia.com/gpu.shared": "2"}}}
            ],
        },
        "status": {"phase": "Running"},
    }


def test_pods_without_a_node_or_extended_resources_are_not_kept() -> None:
    cpu_only = {"metadata": {"name": "c"}, "spec": {"nodeName": "n", "containers": [{"resources": {}}]}}
    assert trim_pod(gpu_pod("pending", None)) is None
    assert trim_pod(cpu_only) is None
    assert trim_pod({}) is None


def test_events_add_update_and_delete() -> None:
    items: dict = {}
    apply_event(items, "ADDED", gpu_pod("p", None), trim_pod)
    assert items == {}
    apply_event(items, "MODIFIED", gpu_pod("p", "gpu-1"), trim_pod)  # bound by the scheduler
    assert list(items) == ["ns/p"]
    apply_event(items, "MODIFIED", gpu_pod("p", "gpu-1", amount="3"), trim_pod)
    assert items["ns/p"]["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu.shared": "3"}
    apply_event(items, "DELETED", gpu_pod("p", "gpu-1"), trim_pod)
    assert items == {}


def test_trimmed_objects_give_the_same_free_count_as_full_ones() -> None:
    pods = [gpu_pod("a", "gpu-1"), gpu_pod("b", "gpu-1", amount="3"), gpu_pod("c", None)]
    kept = [p for p in map(trim_pod, pods) if p is not None]
    full = free_units([NODE], pods, "nvidia.com/gpu.shared", {"pool": "gpu"})
    assert full == 3
    assert free_units([trim_node(NODE)], kept, "nvidia.com/gpu.shared", {"pool": "gpu"}) == full


def test_units_of_pods_below_a_notebooks_priority_count_as_free() -> None:
    batch = gpu_pod("batch", "gpu-1", amount="3")
    batch["spec"]["priority"] = -100  # a batch queue's PriorityClass: kube-scheduler preempts it for a notebook
    notebook = gpu_pod("nb", "gpu-1")
    notebook["spec"]["priority"] = 0
    pods = [batch, notebook]
    kept = [p for p in map(trim_pod, pods) if p is not None]
    assert kept[0]["spec"]["priority"] == -100
    assert free_units([NODE], pods, "nvidia.com/gpu.shared", {"pool": "gpu"}) == 8 - 2
    assert free_units([trim_node(NODE)], kept, "nvidia.com/gpu.shared", {"pool": "gpu"}) == 8 - 2
