"""Fake DRA GPUs: a group's draDevices become the ResourceSlices NVIDIA's DRA driver would publish."""

import pytest

from fracnb_testbed.clusters import dra_manifests, load_cluster, parse_cluster
from fracnb_testbed.dra import device_classes, resource_slice
from fracnb_testbed.errors import TestbedError

A100 = "NVIDIA A100-SXM4-80GB"


def group(dra):
    return {"name": "gpu", "capacity": {"cpu": "8"}, "draDevices": dra}


def test_a_shareable_gpu_and_mig_devices_as_the_driver_publishes_them():
    (spec_group,) = parse_cluster({
        "nodeGroups": [group({
            "gpus": [{"product": A100, "memory": "80Gi", "count": 1}],
            "mig": [{"product": A100, "profile": "1g.10gb", "memory": "10Gi", "count": 2}],
        })]
    }).groups  # fmt: skip
    manifest = resource_slice("gpu-0", spec_group.dra_devices)
    assert manifest["metadata"] == {"name": "gpu-0-gpu.nvidia.com"}
    spec = manifest["spec"]
    assert (spec["driver"], spec["nodeName"]) == ("gpu.nvidia.com", "gpu-0")
    assert spec["pool"] == {"name": "gpu-0", "generation": 1, "resourceSliceCount": 1}
    gpu, *mig = spec["devices"]
    uuid = gpu["attributes"].pop("uuid")["string"]
    assert uuid.startswith("GPU-")
    assert gpu == {
        "name": "gpu-0",
        "allowMultipleAllocations": True,
        "attributes": {"type": {"string": "gpu"}, "productName": {"string": A100}},
        "capacity": {
            "memory": {
                "value": "80Gi",
                "requestPolicy": {"default": "80Gi", "validRange": {"min": "1Mi", "max": "80Gi", "step": "1Mi"}},
            }
        },
    }
    assert [device["name"] for device in mig] == ["gpu-1-mig-1g-10gb-1", "gpu-1-mig-1g-10gb-2"]
    for device in mig:
        attributes = device["attributes"]
        assert {k: attributes[k] for k in ("type", "profile", "productName")} == {
            "type": {"string": "mig"},
            "profile": {"string": "1g.10gb"},
            "productName": {"string": A100},
        }
        assert attributes["parentUUID"]["string"] != uuid  # carved from the second GPU, not the shared one
        assert device["capacity"] == {"memory": {"value": "10Gi"}}
        assert "allowMultipleAllocations" not in device


def test_device_classes_select_by_the_drivers_type_attribute():
    assert [(c["metadata"]["name"], c["spec"]["selectors"][0]["cel"]["expression"]) for c in device_classes()] == [
        ("gpu.nvidia.com", "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"),
        ("mig.nvidia.com", "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"),
    ]


def test_the_dra_cluster_publishes_slices_and_needs_the_controller_manager():
    spec = load_cluster("dra")
    assert spec.uses_dra
    kinds = [(m["kind"], m["metadata"]["name"]) for m in dra_manifests(spec)]
    assert kinds == [
        ("DeviceClass", "gpu.nvidia.com"),
        ("DeviceClass", "mig.nvidia.com"),
        ("ResourceSlice", "a100-dra-0-gpu.nvidia.com"),
        ("ResourceSlice", "h100-dra-0-gpu.nvidia.com"),
        ("ResourceSlice", "a100-mig-0-gpu.nvidia.com"),
    ]
    mixed = load_cluster("mixed")
    assert not mixed.uses_dra
    assert dra_manifests(mixed) == []


@pytest.mark.parametrize(
    ("dra", "message"),
    [
        ({"gpus": [{"product": A100, "memory": "80GB", "count": 1}]}, "memory '80GB' must be a whole number"),
        ({"gpus": [{"product": A100, "memory": "80Gi"}]}, "draDevices.gpus[0] must have exactly the keys"),
        ({"mig": [{"product": A100, "profile": "big", "memory": "10Gi", "count": 1}]}, "profile 'big' is not"),
        ({"gpus": [{"product": A100, "memory": "80Gi", "count": 0}]}, "count 0 must be from 1 to 64"),
        ({"tpus": []}, "draDevices must be a mapping with ['gpus', 'mig']"),
    ],
)
def test_invalid_dra_devices_are_reported_with_the_group(dra, message):
    with pytest.raises(TestbedError) as error:
        parse_cluster({"nodeGroups": [group(dra)]}, "test.yaml")
    assert "test.yaml: node group 'gpu'" in str(error.value)
    assert message in str(error.value)
