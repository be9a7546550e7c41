"""What placement reads of the cluster and what it writes into a claim and a pod, against literal dicts."""

from __future__ import annotations

from datetime import datetime, timezone

from kubernetes_asyncio.client.models import V1ObjectMeta, V1Pod, V1PodSpec

from fracnb_spawner.cluster.devices import DraWant, trim_claim, trim_slice
from fracnb_spawner.cluster.slots import Cluster
from fracnb_spawner.gpu.dra import with_card_preference
from fracnb_spawner.placement.cards import dra_cards, dra_competitor, whole_card_waiting
from fracnb_spawner.placement.decide import Holder
from fracnb_spawner.placement.hub import prefer_node

GIB = 2**30
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
DRIVER = "gpu.nvidia.com"
SHARE = {"deviceClassName": DRIVER, "capacity": {"requests": {"memory": "20Gi"}}}


def gpu(name: str, uuid: str) -> dict:
    return {
        "name": name,
        "allowMultipleAllocations": True,
        "attributes": {"type": {"string": "gpu"}, "productName": {"string": "NVIDIA A100-SXM4-80GB"},
                       "uuid": {"string": uuid}},
        "capacity": {"memory": {"value": "80Gi"}},
    }  # fmt: skip


def slice_(node: str, *devices: dict) -> dict:
    spec = {"driver": DRIVER, "nodeName": node, "pool": {"name": node}, "devices": list(devices)}
    return trim_slice({"metadata": {"name": f"{node}-{DRIVER}"}, "spec": spec})


def claim(pod: str, node: str, device: str, memory: str = "20Gi") -> dict:
    result = {
        "request": "gpu",
        "driver": DRIVER,
        "pool": node,
        "device": device,
        "consumedCapacity": {"memory": memory},
    }
    return trim_claim({
        "metadata": {"name": f"{pod}-gpu", "namespace": "hub", "ownerReferences": [{"kind": "Pod", "name": pod}]},
        "status": {"allocation": {"devices": {"results": [result]}}},
    })  # fmt: skip


def notebook(name: str, user: str, node: str | None = "dev-0", fraction: str = "1/4") -> dict:
    annotations = {"hub.jupyter.org/username": user, "fracnb.io/gpu-fraction": fraction}
    return {"metadata": {"name": name, "namespace": "hub", "annotations": annotations}, "spec": {"nodeName": node}}


NODES = [{"metadata": {"name": name, "labels": {}}, "spec": {}} for name in ("dev-0", "dev-1")]


def test_cards_carry_their_node_uuid_free_memory_and_holders_by_user() -> None:
    cluster = Cluster(
        NODES,
        [notebook("jupyter-ann", "ann"), notebook("jupyter-bob", "bob", "dev-1")],
        [slice_("dev-0", gpu("gpu-0", "GPU-a")), slice_("dev-1", gpu("gpu-0", "GPU-b"), gpu("gpu-1", "GPU-c"))],
        [claim("jupyter-ann", "dev-0", "gpu-0"), claim("jupyter-bob", "dev-1", "gpu-1", "60Gi"),
         claim("batch-job", "dev-1", "gpu-1")],
    )  # fmt: skip
    cards = {card.key: card for card in dra_cards(cluster, DraWant(DRIVER, "gpu", memory=20 * GIB), NOW)}
    assert set(cards) == {"gpu.nvidia.com/dev-0/gpu-0", "gpu.nvidia.com/dev-1/gpu-0", "gpu.nvidia.com/dev-1/gpu-1"}
    ann = cards["gpu.nvidia.com/dev-0/gpu-0"]
    assert (ann.node, ann.device, ann.uuid, ann.free, ann.capacity) == ("dev-0", "gpu-0", "GPU-a", 60 * GIB, 80 * GIB)
    assert ann.holders == (Holder("ann"),)
    assert cards["gpu.nvidia.com/dev-1/gpu-0"].holders == ()
    # A pod the hub does not see as a notebook (a lent job) is a holder of unknown user.
    assert cards["gpu.nvidia.com/dev-1/gpu-1"].holders == (Holder("bob"), Holder(""))
    assert cards["gpu.nvidia.com/dev-1/gpu-1"].free == 0


def test_a_whole_card_server_not_yet_on_a_node_waits_for_whole_cards() -> None:
    running = [notebook("jupyter-ann", "ann", fraction="1"), notebook("jupyter-bob", "bob", None, "1/4")]
    assert whole_card_waiting(running) is None
    waiting = notebook("jupyter-cat", "cat", None, "2")
    assert whole_card_waiting([*running, waiting]) == "a whole-card start (jupyter-cat)"
    # Only a start that could take the same cards: the same device class, the same product or any.
    kind = {"fracnb.io/slot-kind": "gpu.nvidia.com.NVIDIA-H100-80GB-HBM3"}
    h100 = {**waiting, "metadata": {**waiting["metadata"], "labels": kind}}
    a100_share = DraWant(DRIVER, "gpu", "NVIDIA-A100-SXM4-80GB", memory=GIB)
    assert whole_card_waiting([h100], dra_competitor("gpu.nvidia.com", a100_share)) is None
    assert whole_card_waiting([h100], dra_competitor("gpu.nvidia.com", DraWant(DRIVER, "gpu", memory=GIB)))
    any_kind = {**waiting, "metadata": {**waiting["metadata"], "labels": {"fracnb.io/slot-kind": "gpu.nvidia.com.any"}}}
    assert whole_card_waiting([any_kind], dra_competitor("gpu.nvidia.com", a100_share))
    leaving = {**waiting, "metadata": {**waiting["metadata"], "deletionTimestamp": "2026-12-06T00:00:00Z"}}
    assert whole_card_waiting([leaving, notebook("x", "x", None, "nonsense")]) is None


def test_a_claim_prefers_the_ranked_cards_by_uuid_then_takes_any_card() -> None:
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": SHARE}],
                        "config": [{"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {}}}]}}  # fmt: skip
    preferred = with_card_preference(spec, ["GPU-b", "GPU-a"], DRIVER)
    (request,) = preferred["devices"]["requests"]
    uuid = "device.attributes['gpu.nvidia.com']"
    assert request == {
        "name": "gpu",
        "firstAvailable": [
            {"name": "card-0", **SHARE, "selectors": [{"cel": {"expression": f"has({uuid}.uuid) && {uuid}.uuid == 'GPU-b'"}}]},
            {"name": "card-1", **SHARE, "selectors": [{"cel": {"expression": f"has({uuid}.uuid) && {uuid}.uuid == 'GPU-a'"}}]},
            {"name": "any", **SHARE},
        ],
    }  # fmt: skip
    assert preferred["devices"]["config"] == spec["devices"]["config"]  # the sharing config names the request
    assert spec["devices"]["requests"][0] == {"name": "gpu", "exactly": SHARE}  # the plan's own spec is unchanged


def test_a_preference_keeps_the_products_selector_and_leaves_whole_cards_and_no_preference_alone() -> None:
    product = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName == 'x'"}}
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": {**SHARE, "selectors": [product]}}]}}
    (request,) = with_card_preference(spec, ["GPU-a"], DRIVER)["devices"]["requests"]
    assert request["firstAvailable"][0]["selectors"][0] == product
    assert request["firstAvailable"][1]["selectors"] == [product]
    whole = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": 2}}]}}
    assert with_card_preference(whole, ["GPU-a"], DRIVER) == whole
    assert with_card_preference(spec, [], DRIVER) is spec


def test_the_pod_prefers_the_first_cards_node_once_and_keeps_kubespawners_affinity() -> None:
    pod = V1Pod(metadata=V1ObjectMeta(name="p"), spec=V1PodSpec(containers=[]))
    prefer_node(pod, "dev-1")
    prefer_node(pod, "dev-1")
    (term,) = pod.spec.affinity.node_affinity.preferred_during_scheduling_ignored_during_execution
    assert term.weight == 100
    assert term.preference.match_fields[0].to_dict() == {"key": "metadata.name", "operator": "In", "values": ["dev-1"]}
