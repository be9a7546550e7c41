"""The service's metrics for the dashboard and the alerts (helm-values/): queue waits past their
maximum, GPU units per resource, group quotas, hibernations. Literal pods and nodes, as listed."""

from __future__ import annotations

from datetime import timedelta
from fractions import Fraction

import pytest

from fracnb_spawner.quota.policy import QuotaPolicy
from fracnb_spawner.service.gpuunits import gpu_kinds
from fracnb_spawner.service.metrics import HIBERNATION_OUTCOMES, CullMetrics
from tests.hub_pods import MIG, SHARED, T0, pod

SHARED_RESOURCE = "nvidia.com/gpu.shared"


def queued(user, *, kind=SHARED, minutes_ago, max_wait=None):
    extra = {} if max_wait is None else {"fracnb.io/max-wait": str(max_wait)}
    stamp = (T0 - timedelta(minutes=minutes_ago)).isoformat().replace("+00:00", "Z")
    return pod(user, kind=kind, queued=True, queued_at=stamp, **extra)


def test_the_longest_wait_and_the_spawns_past_their_max_wait_per_kind() -> None:
    metrics = CullMetrics()
    sample = metrics.registry.get_sample_value
    metrics.observe_pods(
        [
            pod("running"),
            queued("recent", minutes_ago=5, max_wait=3600),
            queued("overdue", minutes_ago=70, max_wait=3600),
            queued("no-max-wait", minutes_ago=90),  # an older hub's pod: not judged
            queued("mig", kind=MIG, minutes_ago=20, max_wait=600),
        ],
        now=T0,
    )
    assert sample("fracnb_queue_longest_wait_seconds", {"slot_kind": SHARED}) == 90 * 60
    assert sample("fracnb_queue_overdue_spawns", {"slot_kind": SHARED}) == 1
    assert sample("fracnb_queue_longest_wait_seconds", {"slot_kind": MIG}) == 20 * 60
    assert sample("fracnb_queue_overdue_spawns", {"slot_kind": MIG}) == 1
    # Ten minutes later the recent one is still within its hour; the MIG spawn has gone.
    metrics.observe_pods([queued("recent", minutes_ago=15, max_wait=3600)], now=T0)
    assert sample("fracnb_queue_overdue_spawns", {"slot_kind": SHARED}) == 0
    assert sample("fracnb_queue_longest_wait_seconds", {"slot_kind": SHARED}) == 15 * 60
    assert sample("fracnb_queue_overdue_spawns", {"slot_kind": MIG}) is None


def test_group_quotas_are_exported_and_their_groups_observed() -> None:
    metrics = CullMetrics()
    metrics.observe_quotas(
        QuotaPolicy(default_user=Fraction(1), groups={"team-a": Fraction(1, 2), "team-b": Fraction(2)})
    )
    sample = metrics.registry.get_sample_value
    assert sample("fracnb_group_quota_gpus", {"group": "team-a"}) == 0.5
    assert sample("fracnb_group_quota_gpus", {"group": "team-b"}) == 2
    assert metrics.quota_groups == {"team-a", "team-b"}


def gpu_node(name, product, allocatable, *, cordoned=False):
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
        "spec": {"unschedulable": cordoned},
        "status": {"allocatable": {"cpu": "64", SHARED_RESOURCE: str(allocatable)}},
    }


def gpu_pod(node, units, phase="Running"):
    resources = {"limits": {SHARED_RESOURCE: str(units)}}
    return {
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": resources}]},
        "status": {"phase": phase},
    }


def test_gpu_units_allocatable_allocated_and_free_per_resource_and_product() -> None:
    metrics = CullMetrics()
    nodes = [
        gpu_node("a1", "A100", 4),
        gpu_node("a2", "A100", 4),
        gpu_node("h1", "H100", 8),
        gpu_node("cordoned", "H100", 8, cordoned=True),
    ]
    pods = [gpu_pod("a1", 3), gpu_pod("a2", 1), gpu_pod("a2", 1, phase="Succeeded"), gpu_pod("h1", 8)]
    metrics.observe_gpu_kinds(gpu_kinds(nodes, pods, lambda resource: resource.startswith("nvidia.com/")))
    sample = metrics.registry.get_sample_value
    a100 = {"resource": SHARED_RESOURCE, "product": "A100"}
    h100 = {"resource": SHARED_RESOURCE, "product": "H100"}
    assert (sample("fracnb_gpu_allocatable_units", a100), sample("fracnb_gpu_allocated_units", a100)) == (8, 4)
    assert sample("fracnb_gpu_free_units", a100) == 4
    assert (sample("fracnb_gpu_allocatable_units", h100), sample("fracnb_gpu_free_units", h100)) == (8, 0)
    # Nodes gone from the listing take their series with them.
    metrics.observe_gpu_kinds(gpu_kinds(nodes[:1], pods, lambda resource: True))
    assert sample("fracnb_gpu_free_units", h100) is None


def test_hibernations_count_by_outcome_from_zero() -> None:
    metrics = CullMetrics()
    sample = metrics.registry.get_sample_value
    assert {outcome: sample("fracnb_hibernations_total", {"outcome": outcome}) for outcome in HIBERNATION_OUTCOMES} == {
        "saved": 0,
        "partly-saved": 0,
        "failed": 0,
        "skipped-over-limit": 0,
    }
    metrics.record_hibernation("partly-saved")
    assert sample("fracnb_hibernations_total", {"outcome": "partly-saved"}) == 1
    with pytest.raises(ValueError, match="unknown hibernation outcome 'lost'"):
        metrics.record_hibernation("lost")
