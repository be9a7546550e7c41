"""The dra backend's manifest fragments (pure), against literal dicts."""

from __future__ import annotations

from dataclasses import replace

import pytest
from traitlets import TraitError

from fracnb_spawner.config.traits import FractionalTraits
from fracnb_spawner.form.progress import scheduler_saw_slots
from fracnb_spawner.gpu.backends import BackendSettings, PodFields
from fracnb_spawner.gpu.dra import companion_names, memory_quantity, named_for_pod
from fracnb_spawner.gpu.plan import GPUConfigError, GPUDefaults
from fracnb_spawner.gpu.resolve import parse_gpu_spec, plan_gpu
from fracnb_spawner.gpu.table import backend_fields
from fracnb_spawner.gpu.words import plan_summary

GIB = 2**30
SETTINGS = BackendSettings("nvidia.com/gpu.shared", "nvidia.com/gpu.shared", "hami", "kai", "q", "default", 0.95)
DEFAULTS = GPUDefaults("time-slicing", 80 * GIB, "A100-80GB", {"NVIDIA-H100-80GB-HBM3": 80 * GIB})


def claim_of(gpu: dict, settings: BackendSettings = SETTINGS) -> tuple:
    plan = plan_gpu(parse_gpu_spec(gpu), DEFAULTS)
    fields = backend_fields(plan, settings)
    (claim,) = fields.companions
    assert claim["kind"] == "ResourceClaim"
    return plan, fields, claim["spec"]["devices"]


def test_a_quarter_is_a_20gib_memory_slice_of_a_gpu() -> None:
    plan, fields, devices = claim_of({"fraction": 0.25, "backend": "dra"})
    assert devices == {
        "requests": [
            {
                "name": "gpu",
                "exactly": {"deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"memory": "20Gi"}}},
            }
        ]
    }
    assert fields.pod_claims == [{"name": "gpu", "resourceClaimName": "gpu"}]
    assert fields.container_claims == [{"name": "gpu"}]
    assert fields.resources == {}
    assert fields.scheduler_name is None
    assert fields.companions[0]["apiVersion"] == "resource.k8s.io/v1"
    assert (plan.backend, plan.isolation, plan.memory_bytes) == ("dra", "none", 20 * GIB)
    # Nothing on the GPU enforces a slice: the soft caps are set as for time-slicing.
    assert fields.environment["FRACNB_SOFT_CAP_BYTES"] == str(int(20 * GIB * 0.95))
    assert plan_summary(plan) == "0.25 GPU (dra), 20 GiB GPU memory, not enforced (shared, soft caps only)"


def test_explicit_memory_and_product_become_capacity_and_a_cel_selector() -> None:
    _plan, _fields, devices = claim_of(
        {"fraction": 0.5, "backend": "dra", "memory": "12.5Gi", "product": "NVIDIA-H100-80GB-HBM3"}
    )
    assert devices["requests"][0]["exactly"] == {
        "deviceClassName": "gpu.nvidia.com",
        "capacity": {"requests": {"memory": "12800Mi"}},
        "selectors": [
            {
                "cel": {
                    "expression": "device.attributes['gpu.nvidia.com'].productName.replace(' ', '-')"
                    " == 'NVIDIA-H100-80GB-HBM3'"
                }
            }
        ],
    }


@pytest.mark.parametrize(
    ("size", "quantity"), [(20 * GIB, "20Gi"), (1536 * 2**20, "1536Mi"), (2**30 + 1, "1025Mi"), (2**20, "1Mi")]
)
def test_memory_in_the_drivers_one_mib_steps_rounded_up(size: int, quantity: str) -> None:
    assert memory_quantity(size) == quantity


def test_time_slicing_sharing_adds_the_drivers_gpu_config() -> None:
    plan, _fields, devices = claim_of({"fraction": 0.25, "backend": "dra", "sharing": "time-slicing"})
    assert devices["config"] == [
        {
            "requests": ["gpu"],
            "opaque": {
                "driver": "gpu.nvidia.com",
                "parameters": {
                    "apiVersion": "resource.nvidia.com/v1beta1",
                    "kind": "GpuConfig",
                    "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}},
                },
            },
        }
    ]
    assert plan.isolation == "none"


def test_mps_sharing_pins_the_budget_and_counts_as_enforced() -> None:
    plan, fields, devices = claim_of({"fraction": 0.25, "backend": "dra", "sharing": "mps"})
    assert devices["config"][0]["opaque"]["parameters"]["sharing"] == {
        "strategy": "MPS",
        "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "20Gi"},
    }
    assert (plan.isolation, plan.isolation_words) == ("enforced", "enforced by the MPS pinned-memory limit")
    assert "FRACNB_SOFT_CAP_BYTES" not in fields.environment


def test_a_mig_profile_is_a_mig_device_selected_by_cel() -> None:
    plan, _fields, devices = claim_of({"backend": "dra", "mig_profile": "1g.10gb"})
    assert devices == {
        "requests": [
            {
                "name": "gpu",
                "exactly": {
                    "deviceClassName": "mig.nvidia.com",
                    "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}],
                },
            }
        ]
    }
    assert (plan.backend, plan.isolation, plan.memory_bytes) == ("dra", "hard", 10 * GIB)


@pytest.mark.parametrize(("fraction", "profile"), [(0.125, "1g.10gb"), (0.25, "1g.20gb"), (0.5, "3g.40gb")])
def test_a_fraction_with_mig_sharing_is_the_smallest_fitting_profile(fraction: float, profile: str) -> None:
    on_mig = plan_gpu(parse_gpu_spec({"fraction": fraction, "backend": "mig"}), DEFAULTS)
    plan, _fields, devices = claim_of({"fraction": fraction, "backend": "dra", "sharing": "mig"})
    assert plan.mig_slice == on_mig.mig_slice
    assert plan.mig_slice.profile == profile
    assert profile in devices["requests"][0]["exactly"]["selectors"][0]["cel"]["expression"]


def test_count_requests_whole_devices() -> None:
    plan, fields, devices = claim_of({"count": 2, "backend": "dra", "product": "NVIDIA-H100-80GB-HBM3"})
    exactly = devices["requests"][0]["exactly"]
    assert {k: exactly[k] for k in ("deviceClassName", "allocationMode", "count")} == {
        "deviceClassName": "gpu.nvidia.com",
        "allocationMode": "ExactCount",
        "count": 2,
    }
    assert "capacity" not in exactly
    assert (plan.backend, plan.scheduler_backend, plan.isolation) == ("whole", "dra", "hard")
    assert fields.resources == {}


def test_device_classes_and_driver_are_configurable() -> None:
    settings = replace(
        SETTINGS, dra_device_class="gpu.example.com", dra_mig_device_class="mig.example.com", dra_driver="example.com"
    )
    _plan, _fields, slice_ = claim_of({"fraction": 0.25, "backend": "dra", "sharing": "mps"}, settings)
    _plan, _fields, mig = claim_of({"backend": "dra", "mig_profile": "2g.20gb"}, settings)
    assert slice_["requests"][0]["exactly"]["deviceClassName"] == "gpu.example.com"
    assert slice_["config"][0]["opaque"]["driver"] == "example.com"
    assert mig["requests"][0]["exactly"]["deviceClassName"] == "mig.example.com"
    assert (
        "device.attributes['example.com'].profile" in mig["requests"][0]["exactly"]["selectors"][0]["cel"]["expression"]
    )


def test_claims_are_named_after_the_pod_and_carry_its_labels() -> None:
    _plan, fields, _devices = claim_of({"fraction": 0.25, "backend": "dra"})
    labelled = replace(fields, labels={"fracnb.io/gpu-backend": "dra"})
    named = named_for_pod(labelled, "jupyter-alice")
    assert named.companions[0]["metadata"] == {
        "name": "jupyter-alice-gpu",
        "labels": {"fracnb.io/gpu-backend": "dra"},
        "annotations": {"fracnb.io/pod": "jupyter-alice"},  # whose it is before the pod owns it
        "finalizers": ["resource.kubernetes.io/delete-protection"],  # kube-scheduler's, set ahead of it
    }
    assert named.pod_claims == [{"name": "gpu", "resourceClaimName": "jupyter-alice-gpu"}]
    assert named.container_claims == [{"name": "gpu"}]
    assert fields.companions[0]["metadata"]["name"] == "gpu"  # the original is untouched
    assert companion_names("jupyter-alice") == ["jupyter-alice-gpu"]
    assert named_for_pod(PodFields(), "p") == PodFields()


@pytest.mark.parametrize(
    ("gpu", "message"),
    [
        ({"fraction": 0.25, "sharing": "mps"}, "'sharing: mps' does not apply to the time-slicing backend"),
        ({"fraction": 0.25, "backend": "dra", "sharing": "exclusive"}, "unknown sharing 'exclusive'"),
        ({"count": 1, "backend": "dra", "sharing": "mps"}, "whole GPUs ('count') are not shared"),
        ({"mig_profile": "1g.10gb", "backend": "dra", "sharing": "mps"}, "a 'mig_profile' is a MIG device"),
        ({"mig_profile": "1g.10gb", "backend": "kai"}, "'mig_profile' needs the mig or dra backend, not 'kai'"),
        ({"backend": "dra", "sharing": "mps"}, "a gpu entry needs 'fraction', 'count' or 'mig_profile'"),
        ({"fraction": 0.25, "backend": "dra", "memory": "90Gi"}, "is more than one GPU's memory"),
    ],
)
def test_configuration_that_cannot_work_is_refused(gpu: dict, message: str) -> None:
    with pytest.raises(GPUConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan_gpu(parse_gpu_spec(gpu), DEFAULTS)


def test_the_schedulers_refusal_of_a_claim_reads_as_full() -> None:
    plan = plan_gpu(parse_gpu_spec({"fraction": 0.25, "backend": "dra"}), DEFAULTS)
    refusal = "0/3 nodes are available: 1 cannot allocate all claims, 2 node(s) didn't match Pod's node affinity."
    assert scheduler_saw_slots(refusal, plan)
    assert not scheduler_saw_slots("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.shared.", plan)


def test_a_device_class_that_is_no_dns_name_is_refused_naming_the_trait() -> None:
    traits = FractionalTraits()
    traits.dra_device_class = "shared.gpu.example.com"
    assert traits.backend_settings().dra_device_class == "shared.gpu.example.com"
    with pytest.raises(TraitError, match=r"FractionalSpawner.dra_mig_device_class: 'MIG GPUs' is not a DNS subdomain"):
        traits.dra_mig_device_class = "MIG GPUs"
