"""What a queued spawn competes for and whether it fits (pure), against literal dicts: slot kinds and
ledgers of both ways of counting, as the backend table's records give them."""

from __future__ import annotations

from fracnb_spawner.cluster.devices import DraWant, trim_claim, trim_slice
from fracnb_spawner.cluster.slots import Cluster, DraAsk, ResourceAsk, ask_for, dra_slot_kind, servers_free
from fracnb_spawner.gpu.backends import BackendSettings
from fracnb_spawner.gpu.plan import GPUDefaults
from fracnb_spawner.gpu.resolve import parse_gpu_spec, plan_gpu
from fracnb_spawner.gpu.table import backend_fields, backend_named

GIB = 2**30
DRIVER = "gpu.nvidia.com"
SETTINGS = BackendSettings("nvidia.com/gpu.shared", "nvidia.com/gpu.shared", "hami", "kai", "q", "default", 0.95)
DEFAULTS = GPUDefaults("time-slicing", 80 * GIB, "A100-80GB")
A100 = "NVIDIA-A100-SXM4-80GB"


def ask_of(gpu: dict, node_selector: dict | None = None):
    plan = plan_gpu(parse_gpu_spec(gpu), DEFAULTS)
    return ask_for(plan, backend_fields(plan, SETTINGS), SETTINGS, node_selector or {})


def gpu_device(name: str, product: str = "NVIDIA A100-SXM4-80GB") -> dict:
    return {
        "name": name,
        "allowMultipleAllocations": True,
        "attributes": {"type": {"string": "gpu"}, "productName": {"string": product}},
        "capacity": {"memory": {"value": "80Gi"}},
    }


def mig_device(name: str, profile: str) -> dict:
    return {
        "name": name,
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": profile},
            "productName": {"string": "NVIDIA A100-SXM4-80GB"},
        },
    }


SLICES = [
    trim_slice({"metadata": {"name": "a"}, "spec": {"driver": DRIVER, "pool": {"name": "a100"}, "devices": [gpu_device("gpu-0")]}}),
    trim_slice({"metadata": {"name": "h"}, "spec": {"driver": DRIVER, "pool": {"name": "h100"}, "devices": [gpu_device("gpu-0", "NVIDIA H100 80GB HBM3")]}}),
    trim_slice({"metadata": {"name": "m"}, "spec": {"driver": DRIVER, "pool": {"name": "mig"}, "devices": [mig_device("m-a", "1g.10gb"), mig_device("m-b", "1g.10gb")]}}),
]  # fmt: skip


def claim(pod: str, pool: str, device: str, memory: str | None = None) -> dict:
    result = {"driver": DRIVER, "pool": pool, "device": device}
    if memory:
        result["consumedCapacity"] = {"memory": memory}
    trimmed = trim_claim({
        "metadata": {"name": f"{pod}-gpu-x", "namespace": "ns", "ownerReferences": [{"kind": "Pod", "name": pod}]},
        "status": {"allocation": {"devices": {"results": [result]}}},
    })  # fmt: skip
    assert trimmed is not None
    return trimmed


def test_a_dra_kind_is_device_class_and_product_not_the_slice_size() -> None:
    quarter = ask_of({"fraction": 0.25, "backend": "dra", "product": A100})
    half = ask_of({"fraction": 0.5, "backend": "dra", "product": A100})
    assert isinstance(quarter, DraAsk)
    assert quarter.kind == half.kind == "gpu.nvidia.com.NVIDIA-A100-SXM4-80GB"
    assert (quarter.want.memory, half.want.memory) == (20 * GIB, 40 * GIB)
    assert ask_of({"fraction": 0.25, "backend": "dra"}).kind == "gpu.nvidia.com.any"
    assert ask_of({"backend": "dra", "mig_profile": "1g.10gb"}).kind == "mig.nvidia.com.any.1g.10gb"
    assert ask_of({"count": 2, "backend": "dra", "product": A100}).kind == quarter.kind  # the same GPUs
    assert dra_slot_kind("gpu.nvidia.com", DraWant(DRIVER, "gpu", "X" * 80, memory=GIB)).startswith("gpu.nvidia.com.X")


def test_each_backend_record_says_what_its_pods_compete_for() -> None:
    assert backend_named("dra").counted_by == "dra"
    assert backend_named("time-slicing").counted_by == "extended-resource"
    assert backend_named("hami").counted_by == backend_named("kai").counted_by == "not-counted"
    assert ask_of({"fraction": 0.5, "backend": "hami"}) is None  # HAMi's scheduler places it by its own books
    shared = ask_of({"fraction": 0.25}, {"pool": "gpu"})
    assert shared == ResourceAsk("nvidia.com-gpu.shared.4.time-slicing.gpu", "nvidia.com/gpu.shared",
                                 {"pool": "gpu", "nvidia.com/gpu.replicas": "4",
                                  "nvidia.com/gpu.sharing-strategy": "time-slicing"}, 1)  # fmt: skip
    assert ask_of({"fraction": 0.5, "backend": "hami"}) is None  # HAMi's scheduler queues its own


def test_a_memory_slice_fits_on_a_device_with_that_much_left() -> None:
    quarter = ask_of({"fraction": 0.25, "backend": "dra", "product": A100})
    half = ask_of({"fraction": 0.5, "backend": "dra", "product": A100})
    three = [claim(f"p{i}", "a100", "gpu-0", "20Gi") for i in range(3)]
    cluster = Cluster([], [], SLICES, three)
    assert servers_free(quarter, cluster) == 1
    assert servers_free(half, cluster) == 0  # 20 GiB left: a 40 GiB waiter does not fit, a 20 GiB one does
    ledger = quarter.ledger(cluster)
    assert ledger.take(quarter) is True
    assert ledger.take(quarter) is False
    assert servers_free(half, Cluster([], [], SLICES, three[:2])) == 1


def test_spawns_on_their_way_take_their_capacity_before_waiters() -> None:
    quarter = ask_of({"fraction": 0.25, "backend": "dra", "product": A100})
    cluster = Cluster([], [], SLICES, [claim("p0", "a100", "gpu-0", "20Gi")])
    assert servers_free(quarter, cluster) == 3
    assert servers_free(quarter, cluster, [quarter, quarter]) == 1  # two lifted, not yet allocated
    mig = ask_of({"backend": "dra", "mig_profile": "1g.10gb"})
    assert servers_free(mig, Cluster([], [], SLICES, [claim("m", "mig", "m-a")])) == 1
    assert servers_free(mig, Cluster([], [], SLICES, []), [mig, mig]) == 0


def test_a_dra_pod_is_placed_once_its_claim_is_allocated() -> None:
    quarter = ask_of({"fraction": 0.25, "backend": "dra", "product": A100})
    cluster = Cluster([], [], SLICES, [claim("jupyter-ann", "a100", "gpu-0", "20Gi")])
    pod = {"metadata": {"namespace": "ns", "name": "jupyter-ann"}, "spec": {"nodeName": "a100"}}
    other = {"metadata": {"namespace": "ns", "name": "jupyter-bob"}, "spec": {"nodeName": "a100"}}
    assert quarter.placed(pod, cluster) is True
    assert quarter.placed(other, cluster) is False  # bound, but its claim not yet seen allocated
    half = {"metadata": {"annotations": {"fracnb.io/gpu-memory-limit": str(40 * GIB)}}}
    assert quarter.of_pod(half).want.memory == 40 * GIB
    assert quarter.of_pod({"metadata": {}}) == quarter


def test_an_extended_resource_ledger_counts_units_of_matching_nodes() -> None:
    nodes = [
        {"metadata": {"name": "a", "labels": {"k": "v"}}, "status": {"allocatable": {"r/x": "4"}}},
        {"metadata": {"name": "c", "labels": {}}, "status": {"allocatable": {"r/x": "8"}}},
    ]
    bound = {
        "metadata": {"name": "p"},
        "spec": {"nodeName": "a", "containers": [{"resources": {"limits": {"r/x": "3"}}}]},
    }
    one = ResourceAsk("k", "r/x", {"k": "v"}, 1)
    cluster = Cluster(nodes, [bound])
    assert servers_free(one, cluster) == 1
    assert servers_free(one, cluster, [one]) == 0
    assert one.could_ever_fit(cluster)
    assert not ResourceAsk("k", "r/x", {"k": "v"}, 5).could_ever_fit(cluster)
    assert one.placed(bound, cluster)
    assert one.of_pod(bound).units == 3


def test_a_server_takes_its_units_from_one_node_the_best_fitting() -> None:
    nodes = [{"metadata": {"name": name, "labels": {}}, "status": {"allocatable": {"r/x": "4"}}} for name in "abc"]
    used = {"a": "3", "b": "3", "c": "2"}  # free: 1, 1 and 2 units
    pods = [
        {
            "metadata": {"name": f"on-{node}"},
            "spec": {"nodeName": node, "containers": [{"resources": {"limits": {"r/x": units}}}]},
        }
        for node, units in used.items()
    ]
    cluster = Cluster(nodes, pods)
    two, one = ResourceAsk("k", "r/x", {}, 2), ResourceAsk("k", "r/x", {}, 1)
    assert servers_free(two, cluster) == 1  # four units free, but only node c has two of them
    assert servers_free(one, cluster) == 4
    # A one-unit server on its way takes a one-unit gap (best fit), not node c's pair.
    assert servers_free(two, cluster, [one]) == 1
    assert servers_free(two, cluster, [one, one, one]) == 0


def test_the_view_keeps_a_queued_dra_pod_and_a_claim_names_its_pod() -> None:
    from fracnb_spawner.cluster.view import trim_pod

    pod = {
        "metadata": {
            "name": "jupyter-ann",
            "namespace": "ns",
            "labels": {"fracnb.io/slot-kind": "gpu.nvidia.com.any"},
            "annotations": {"fracnb.io/gpu-memory-limit": str(20 * GIB), "unrelated": "x"},
        },
        "spec": {"containers": [{"resources": {"claims": [{"name": "gpu"}]}}], "schedulingGates": [{"name": "g"}]},
    }
    kept = trim_pod(pod)
    assert kept is not None
    assert kept["metadata"]["annotations"] == {"fracnb.io/gpu-memory-limit": str(20 * GIB)}
    assert kept["spec"]["schedulingGates"] == [{"name": "g"}]
    assert trim_pod({**pod, "metadata": {"name": "someone-else"}}) is None  # no GPU, not fracnb's
    assert claim("jupyter-ann", "a100", "gpu-0")["owner"] == ("ns", "jupyter-ann")


def test_a_dra_ask_counts_only_devices_on_nodes_its_node_selector_matches() -> None:
    pinned = ask_of({"fraction": 0.25, "backend": "dra"}, {"pool": "big"})
    assert pinned.kind == "gpu.nvidia.com.any.big"
    assert pinned.want.node_selector == (("pool", "big"),)
    on_nodes = [dict(s, node=s["pool"]) for s in SLICES]  # each slice local to a node named like its pool
    nodes = [
        {"metadata": {"name": "a100", "labels": {"pool": "big"}}, "spec": {}},
        {"metadata": {"name": "h100", "labels": {"pool": "small"}}, "spec": {}},
    ]
    assert servers_free(pinned, Cluster(nodes, [], on_nodes)) == 4  # the a100 node's GPU only
    assert servers_free(ask_of({"fraction": 0.25, "backend": "dra"}), Cluster(nodes, [], on_nodes)) == 8
    cordoned = [{**nodes[0], "spec": {"unschedulable": True}}, nodes[1]]
    assert servers_free(pinned, Cluster(cordoned, [], on_nodes)) == 0
    assert pinned.could_ever_fit(Cluster(cordoned, [], on_nodes))  # it exists, and may take pods again
    shared = [dict(s, node=None) for s in SLICES]  # devices not local to one node: the selector cannot exclude them
    assert servers_free(pinned, Cluster(nodes, [], shared)) == 8
