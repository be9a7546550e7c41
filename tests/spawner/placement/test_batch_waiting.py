"""What waits for whole cards besides fracnb's own whole-card starts, so that placement packs: a batch or lent
job's pod asking whole GPUs of the device plugin (or HAMi), and a batch pod's unallocated DRA claim asking whole
devices, in any namespace; against literal dicts, through the hub view's own trimming."""

from __future__ import annotations

from fracnb_spawner.cluster.devices import trim_viewed_claim
from fracnb_spawner.cluster.view import trim_pod
from fracnb_spawner.placement.cards import asks_whole_cards, whole_card_waiting

GPU = "nvidia.com/gpu"


def batch_pod(name: str, limits: dict, node: str | None = None, **metadata) -> dict:
    return {
        "metadata": {"name": name, "namespace": "training", **metadata},
        "spec": {"nodeName": node, "priority": -100, "containers": [{"name": "job", "resources": {"limits": limits}}]},
    }


def viewed(*pods: dict) -> list[dict]:
    """The pods as the hub's view keeps them."""
    return [kept for kept in map(trim_pod, pods) if kept is not None]


def test_a_pending_batch_pod_asking_whole_gpus_waits_for_whole_cards() -> None:
    waiting = viewed(batch_pod("train-0", {GPU: "2"}))
    assert whole_card_waiting(waiting, whole_resource=GPU) == "a whole-card batch pod (training/train-0)"
    # Only where the caller asks for it: the device plugin's cards are not a DRA pool's.
    assert whole_card_waiting(waiting) is None


def test_running_shares_cpu_pods_and_leaving_pods_wait_for_nothing() -> None:
    running = batch_pod("train-1", {GPU: "1"}, node="gpu-3")
    hami_share = batch_pod("share", {GPU: "1", "nvidia.com/gpumem": "4000"})
    hami_half = batch_pod("half", {GPU: "1", "nvidia.com/gpumem-percentage": "50"})
    cpu_only = batch_pod("cpu", {"cpu": "4"})
    leaving = batch_pod("gone", {GPU: "1"}, deletionTimestamp="2026-12-06T00:00:00Z")
    assert viewed(cpu_only) == []  # the view keeps no unbound pod without GPUs
    pods = [*viewed(running, hami_share, hami_half), leaving]
    assert whole_card_waiting(pods, whole_resource=GPU) is None
    # A HAMi pod asking all of a card's memory takes a whole card.
    assert asks_whole_cards(batch_pod("all", {GPU: "1", "nvidia.com/gpumem-percentage": "100"}))
    # fracnb's own pods (a slot kind) wait as whole-card starts, by their fraction: not as batch pods.
    labels = {"labels": {"fracnb.io/slot-kind": "nvidia.com-gpu"}}
    assert not asks_whole_cards(batch_pod("jupyter-ann", {GPU: "1"}, **labels))


def claim(name: str, exactly: dict, *, owned: bool = True, annotations: dict | None = None, allocated=None) -> dict:
    metadata = {"name": name, "namespace": "training", "annotations": annotations or {}}
    if owned:
        metadata["ownerReferences"] = [{"kind": "Pod", "name": name.removesuffix("-gpu")}]
    status = {"allocation": {"devices": {"results": [allocated]}}} if allocated else {}
    return {
        "metadata": metadata,
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        "status": status,
    }


WHOLE = {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2}
SHARE = {"deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"memory": "20Gi"}}}


def test_an_unallocated_claim_of_a_batch_pod_asking_whole_devices_waits_for_whole_cards() -> None:
    kept = trim_viewed_claim(claim("train-2-gpu", WHOLE))
    assert kept == {"metadata": {"name": "train-2-gpu", "namespace": "training"}, "results": [], "owner": None,
                    "waits_for": ["gpu.nvidia.com"]}  # fmt: skip
    said = whole_card_waiting([], claims=[kept], device_class="gpu.nvidia.com")
    assert said == "a whole-card batch claim (training/train-2-gpu)"
    assert whole_card_waiting([], claims=[kept], device_class="mig.nvidia.com") is None


def test_shares_standalone_claims_fracnbs_own_and_allocated_claims_wait_for_nothing() -> None:
    assert trim_viewed_claim(claim("share-gpu", SHARE)) is None
    assert trim_viewed_claim(claim("loose-gpu", WHOLE, owned=False)) is None  # no pod waits on it
    assert trim_viewed_claim(claim("jupyter-cat-gpu", WHOLE, annotations={"fracnb.io/pod": "jupyter-cat"})) is None
    result = {"driver": "gpu.nvidia.com", "pool": "gpu-3", "device": "gpu-0", "request": "gpu"}
    allocated = trim_viewed_claim(claim("train-3-gpu", WHOLE, allocated=result))
    assert allocated["results"][0]["key"] == ("gpu.nvidia.com", "gpu-3", "gpu-0")
    assert "waits_for" not in allocated
    assert whole_card_waiting([], claims=[allocated], device_class="gpu.nvidia.com") is None
