"""HAMi shares on the real control plane: the per-pod card policy the hub writes follows the placement
decision (spread while nothing waits for whole cards, binpack while a whole-card start waits), and the
apiserver accepts the pod. The testbed has no HAMi scheduler, so the test stops at the manifest."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from fracnb_spawner.common.podkeys import FRACTION_ANNOTATION, PLACEMENT_ANNOTATION, QUEUE_GATE, SLOT_KIND_LABEL
from fracnb_spawner.gpu.backends import HAMI_GPU_POLICY_ANNOTATION
from fracnb_spawner.hubstate import HubState
from fracnb_spawner.placement.hub import place
from fracnb_testbed.procs import wait_until_async

pytestmark = pytest.mark.k8s


def whole_card_start(name: str) -> dict:
    """A whole-GPU server waiting in the hub's queue, as the hub leaves it: gated, its fraction annotated."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {SLOT_KIND_LABEL: "nvidia.com-gpu"},
                     "annotations": {FRACTION_ANNOTATION: "1", "hub.jupyter.org/username": "wanda"}},
        "spec": {"schedulingGates": [{"name": QUEUE_GATE}], "containers": [{"name": "notebook", "image": "nb"}]},
    }  # fmt: skip


async def placed_pod(spawner, namespace: str):
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    placement = await place(spawner, pod)
    await spawner.api.create_namespaced_pod(namespace, pod, dry_run="All", field_validation="Strict")
    return pod, placement


async def test_hamis_per_pod_policy_follows_the_decision(cluster_spawner, testbed, k8s_namespace) -> None:
    spawner = cluster_spawner({"profile": "hami"}, user="ann")
    pod, placement = await placed_pod(spawner, k8s_namespace)
    assert (placement.mode, pod.metadata.annotations[HAMI_GPU_POLICY_ANNOTATION]) == ("spread", "spread")
    assert pod.metadata.annotations[PLACEMENT_ANNOTATION] == (
        "HAMi's spread policy picks the card of the node; nothing waits for whole cards"
    )
    rest = testbed.rest()
    try:
        status, answer = rest.request("POST", f"/api/v1/namespaces/{k8s_namespace}/pods", whole_card_start("wanda"))
    finally:
        rest.close()
    assert status == 201, answer

    async def hub_sees_it() -> bool:
        cluster = await HubState.current().watches.read(devices=False, wait=False)
        return cluster is not None and "wanda" in [p["metadata"]["name"] for p in cluster.pods]

    await wait_until_async(hub_sees_it, what="the waiting whole-card pod in the hub's view", timeout=30)
    pod, placement = await placed_pod(cluster_spawner({"profile": "hami"}, user="bob"), k8s_namespace)
    assert (placement.mode, pod.metadata.annotations[HAMI_GPU_POLICY_ANNOTATION]) == ("pack", "binpack")
    assert pod.metadata.annotations[PLACEMENT_ANNOTATION].endswith("a whole-card start (wanda) waits for whole cards")
    # packed: the configured policy on every share, whatever waits.
    config = Config()
    config.FractionalSpawner.placement = "packed"
    config.FractionalSpawner.hami_gpu_scheduler_policy = "spread"
    pod, placement = await placed_pod(cluster_spawner({"profile": "hami"}, user="cat", config=config), k8s_namespace)
    assert placement is None
    assert pod.metadata.annotations[HAMI_GPU_POLICY_ANNOTATION] == "spread"
    assert PLACEMENT_ANNOTATION not in pod.metadata.annotations
