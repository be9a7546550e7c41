"""Free servers of a dra choice from ResourceSlices and allocated claims (pure), against literal dicts."""

from __future__ import annotations

from fractions import Fraction

from fracnb_spawner.cluster.devices import DraWant, free_servers, trim_claim, trim_slice, want_for
from fracnb_spawner.gpu.backends import BackendSettings
from fracnb_spawner.gpu.plan import GPUDefaults
from fracnb_spawner.gpu.resolve import parse_gpu_spec, plan_gpu

GIB = 2**30
DRIVER = "gpu.nvidia.com"
SETTINGS = BackendSettings("nvidia.com/gpu.shared", "nvidia.com/gpu.shared", "hami", "kai", "q", "default", 0.95)
DEFAULTS = GPUDefaults("time-slicing", 80 * GIB, "A100-80GB")


def gpu(name: str, product: str = "NVIDIA A100-SXM4-80GB", memory: str = "80Gi") -> dict:
    return {
        "name": name,
        "allowMultipleAllocations": True,
        "attributes": {"type": {"string": "gpu"}, "productName": {"string": product}},
        "capacity": {"memory": {"value": memory, "requestPolicy": {"default": memory}}},
    }


def mig(name: str, profile: str) -> dict:
    return {
        "name": name,
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": profile},
            "productName": {"string": "NVIDIA A100-SXM4-80GB"},
        },
        "capacity": {"memory": {"value": "10Gi"}},
    }


def slice_(node: str, *devices: dict, driver: str = DRIVER) -> dict:
    return trim_slice({
        "metadata": {"name": f"{node}-{driver}"},
        "spec": {"driver": driver, "nodeName": node, "pool": {"name": node}, "devices": list(devices)},
    })  # fmt: skip


def claim(pool: str, device: str, memory: str | None = None) -> dict | None:
    result = {"request": "gpu", "driver": DRIVER, "pool": pool, "device": device}
    if memory:
        result["consumedCapacity"] = {"memory": memory}
    return trim_claim(
        {"metadata": {"name": "c", "namespace": "n"}, "status": {"allocation": {"devices": {"results": [result]}}}}
    )


SLICES = [
    slice_("a100", gpu("gpu-0")),
    slice_("h100", gpu("gpu-0", "NVIDIA H100 80GB HBM3")),
    slice_("mig", mig("gpu-0-mig-a", "1g.10gb"), mig("gpu-0-mig-b", "1g.10gb"), mig("gpu-0-mig-c", "3g.40gb")),
    slice_("whole", gpu("gpu-0"), gpu("gpu-1"), gpu("gpu-2")),
    slice_("other", gpu("gpu-0"), driver="example.com"),
]
QUARTER_A100 = DraWant(DRIVER, "gpu", "NVIDIA-A100-SXM4-80GB", memory=20 * GIB)


def test_slices_fit_in_the_memory_claims_leave_per_product() -> None:
    assert free_servers(SLICES, [], QUARTER_A100) == 4 + 4 * 3  # the a100 node, and three A100s on "whole"
    claims = [claim("a100", "gpu-0", "20Gi"), claim("a100", "gpu-0", "20Gi"), claim("a100", "gpu-0", "30Gi")]
    assert free_servers(SLICES, claims, QUARTER_A100) == 0 + 12  # 10 GiB left on the a100: no 20 GiB slice
    assert free_servers(SLICES, [], DraWant(DRIVER, "gpu", "NVIDIA-H100-80GB-HBM3", memory=20 * GIB)) == 4
    assert free_servers(SLICES, [], DraWant(DRIVER, "gpu", memory=40 * GIB)) == 2 + 2 + 6  # any product


def test_mig_devices_are_free_until_a_claim_holds_them() -> None:
    small = DraWant(DRIVER, "mig", profile="1g.10gb")
    assert free_servers(SLICES, [], small) == 2
    assert free_servers(SLICES, [claim("mig", "gpu-0-mig-a")], small) == 1
    assert free_servers(SLICES, [], DraWant(DRIVER, "mig", profile="2g.20gb")) == 0


def test_whole_gpus_are_the_untouched_ones_on_one_node() -> None:
    two = DraWant(DRIVER, "gpu", "NVIDIA-A100-SXM4-80GB", count=2)
    assert free_servers(SLICES, [], two) == 1  # "whole" has three: one server of two; single GPUs elsewhere
    assert free_servers(SLICES, [claim("whole", "gpu-1", "1Gi")], two) == 1  # a slice on one: two untouched left
    assert free_servers(SLICES, [claim("whole", "gpu-1", "1Gi"), claim("whole", "gpu-2")], two) == 0


def test_unallocated_claims_hold_nothing() -> None:
    assert trim_claim({"metadata": {"name": "c"}, "status": {}}) is None


def test_a_claim_is_held_by_its_owner_or_before_the_owners_patch_by_the_pod_it_is_reserved_for() -> None:
    result = {"driver": DRIVER, "pool": "a100", "device": "gpu-0", "consumedCapacity": {"memory": "20Gi"}}
    status = {"allocation": {"devices": {"results": [result]}}}
    reserved = {**status, "reservedFor": [{"resource": "pods", "name": "jupyter-ann", "uid": "u1"}]}
    owned = {"name": "c", "namespace": "n", "ownerReferences": [{"kind": "Pod", "name": "jupyter-bob", "uid": "u2"}]}
    assert trim_claim({"metadata": {"name": "c", "namespace": "n"}, "status": reserved})["owner"] == (
        "n",
        "jupyter-ann",
    )
    assert trim_claim({"metadata": owned, "status": reserved})["owner"] == ("n", "jupyter-bob")
    assert trim_claim({"metadata": {"name": "c", "namespace": "n"}, "status": status})["owner"] is None


def test_what_a_plan_asks_of_the_devices() -> None:
    def want(gpu: dict) -> DraWant | None:
        return want_for(plan_gpu(parse_gpu_spec(gpu), DEFAULTS), SETTINGS)

    assert want({"fraction": 0.25, "backend": "dra"}) == DraWant(DRIVER, "gpu", memory=20 * GIB)
    assert want({"fraction": "1/3", "backend": "dra"}).memory == 27307 * 2**20  # whole MiB, as the claim asks
    assert want({"backend": "dra", "mig_profile": "1g.10gb"}) == DraWant(DRIVER, "mig", profile="1g.10gb")
    assert want({"count": 2, "backend": "dra"}) == DraWant(DRIVER, "gpu", count=2)
    assert want({"fraction": 0.25}) is None
    assert want({"count": 1}) is None
    assert Fraction(1, 4) == plan_gpu(parse_gpu_spec({"fraction": 0.25, "backend": "dra"}), DEFAULTS).fraction
