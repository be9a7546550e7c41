"""Fraction arithmetic and every backend's pod fields, against literal expected values."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from fracnb_spawner.common.units import QuantityError, format_bytes, parse_bytes, parse_duration, parse_fraction
from fracnb_spawner.config.traits import FractionalTraits
from fracnb_spawner.culling import CullPolicy
from fracnb_spawner.gpu import mig
from fracnb_spawner.gpu.backends import GPU_REQUEST_ANNOTATIONS, BackendSettings, is_gpu_resource
from fracnb_spawner.gpu.contract import contract_fields
from fracnb_spawner.gpu.plan import GPUDefaults
from fracnb_spawner.gpu.resolve import parse_gpu_spec, plan_gpu
from fracnb_spawner.gpu.table import backend_fields

DEFAULTS = GPUDefaults(backend="time-slicing", gpu_memory=80 * 2**30, mig_model="A100-80GB")
SETTINGS = FractionalTraits().backend_settings()  # the traits' defaults
GIB = 2**30


def fields_for(gpu: dict | None, settings: BackendSettings = SETTINGS) -> tuple:
    plan = plan_gpu(parse_gpu_spec(gpu) if gpu is not None else None, DEFAULTS)
    return plan, backend_fields(plan, settings)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (0.25, Fraction(1, 4)),
        ("1/8", Fraction(1, 8)),
        ("0.5", Fraction(1, 2)),
        (1, Fraction(1)),
        (0.1, Fraction(1, 10)),
    ],
)
def test_parse_fraction(text: object, expected: Fraction) -> None:
    assert parse_fraction(text) == expected


@pytest.mark.parametrize(
    "text",
    ["abc", "1/0", "", "-0.5", None, True, "1/4/2", [0.25], {"a": 1}, float("nan"), float("inf"), "nan", "9" * 5000],
)
def test_parse_fraction_refuses(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_fraction(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("10Gi", 10 * GIB), ("512Mi", 512 * 2**20), ("20G", 20 * 10**9), (4096, 4096), ("1.5Gi", 3 * GIB // 2)],
)
def test_parse_bytes(text: object, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["10 gigs", "ten", "", -1, 0, "0Gi", True, 1.5, ["10Gi"], "9" * 5000])
def test_parse_bytes_refuses(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_bytes(text)


def test_cached_parsers_keep_types_apart() -> None:
    """1, 1.0 and True hash alike; a cached answer for one must not serve the others."""
    assert parse_duration(0) == 0
    assert parse_bytes(1) == 1
    for parse, value in ((parse_duration, 0.0), (parse_duration, False), (parse_bytes, 1.0), (parse_bytes, True)):
        with pytest.raises(QuantityError):
            parse(value)
    with pytest.raises(QuantityError, match=r"\[1\] is not a duration"):
        parse_duration([1])


def test_durations_and_sizes_read_back() -> None:
    assert [parse_duration(v) for v in ("30m", "8h", "1d", "90s", 45, "0")] == [1800, 28800, 86400, 90, 45, 0]
    assert format_bytes(20 * GIB) == "20 GiB"
    assert format_bytes(int(9.5 * GIB)) == "9.5 GiB"


def test_time_slicing_quarter() -> None:
    plan, fields = fields_for({"fraction": 0.25})
    assert plan.fraction == Fraction(1, 4)
    assert plan.memory_bytes == 20 * GIB
    assert fields.resources == {"nvidia.com/gpu.shared": "1"}
    assert fields.node_selector == {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"}
    assert fields.scheduler_name is None
    assert fields.environment == {
        "FRACNB_SOFT_CAP_BYTES": str(int(20 * GIB * 0.95)),
        "PYTORCH_CUDA_ALLOC_CONF": "per_process_memory_fraction:0.2375",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.2375",
        "CUPY_GPU_MEMORY_LIMIT": str(int(20 * GIB * 0.95)),
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
    }


def test_time_slicing_unrenamed_resource_selects_shared_product() -> None:
    plan = plan_gpu(parse_gpu_spec({"fraction": "1/8", "product": "NVIDIA-A100-SXM4-80GB"}), DEFAULTS)
    fields = backend_fields(plan, replace(SETTINGS, time_slicing_resource="nvidia.com/gpu"))
    assert fields.resources == {"nvidia.com/gpu": "1"}
    assert fields.node_selector == {
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
        "nvidia.com/gpu.replicas": "8",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-SHARED",
    }


def test_mps_half_enforces_per_process_without_soft_caps() -> None:
    plan, fields = fields_for({"fraction": 0.5, "backend": "mps"})
    assert plan.isolation == "per-process"
    assert fields.resources == {"nvidia.com/gpu.shared": "1"}
    assert fields.node_selector == {"nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.replicas": "2"}
    assert fields.environment == {}


def test_mig_named_profile() -> None:
    plan, fields = fields_for({"backend": "mig", "mig_profile": "1g.10gb"})
    assert (plan.fraction, plan.memory_bytes, plan.isolation) == (Fraction(1, 8), 10 * GIB, "hard")
    assert fields.resources == {"nvidia.com/mig-1g.10gb": "1"}
    assert fields.node_selector == {"nvidia.com/mig.strategy": "mixed"}


@pytest.mark.parametrize(
    ("fraction", "profile"),
    [("1/8", "1g.10gb"), (0.25, "1g.20gb"), (0.5, "3g.40gb"), (0.3, "3g.40gb"), (1, "7g.80gb")],
)
def test_mig_fraction_maps_to_smallest_profile(fraction: object, profile: str) -> None:
    plan, fields = fields_for({"fraction": fraction, "backend": "mig"})
    assert plan.mig_slice is not None
    assert plan.mig_slice.profile == profile
    assert fields.resources == {f"nvidia.com/mig-{profile}": "1"}


def test_mig_uses_product_catalogue() -> None:
    plan = plan_gpu(parse_gpu_spec({"fraction": 0.25, "backend": "mig", "product": "NVIDIA-H200"}), DEFAULTS)
    assert plan.mig_slice == mig.MigSlice("1g.35gb", 1, 35)


def test_media_extension_profile_resource_name() -> None:
    _, fields = fields_for({"backend": "mig", "mig_profile": "1g.10gb+me"})
    assert fields.resources == {"nvidia.com/mig-1g.10gb.me": "1"}


def test_hami_percentage_and_cores() -> None:
    plan, fields = fields_for({"fraction": 0.5, "backend": "hami", "product": "A100"})
    assert plan.isolation == "enforced"
    assert fields.resources == {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpucores": "50",
        "nvidia.com/gpumem-percentage": "50",
    }
    assert fields.scheduler_name == "hami-scheduler"
    # Shares fill the fullest card first (HAMi's own default spreads them), so whole cards stay free.
    assert fields.annotations == {"nvidia.com/use-gputype": "A100", "hami.io/gpu-scheduler-policy": "binpack"}
    assert fields.environment == {}
    _, spread = fields_for({"fraction": 0.5, "backend": "hami"}, replace(SETTINGS, hami_gpu_policy=""))
    assert spread.annotations == {}


def test_hami_explicit_memory_in_mib() -> None:
    plan, fields = fields_for({"fraction": 0.25, "backend": "hami", "memory": "10Gi"})
    assert plan.memory_bytes == 10 * GIB
    assert fields.resources == {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "25", "nvidia.com/gpumem": "10240"}


def test_kai_fraction_annotation_queue_and_scheduler() -> None:
    plan, fields = fields_for({"fraction": 0.25, "backend": "kai"})
    assert plan.isolation == "none"
    assert fields.resources == {}
    assert fields.scheduler_name == "kai-scheduler"
    assert fields.annotations == {"gpu-fraction": "0.25"}
    assert fields.labels == {"kai.scheduler/queue": "default-queue"}
    assert "PYTORCH_CUDA_ALLOC_CONF" in fields.environment


def test_whole_gpus() -> None:
    plan, fields = fields_for({"count": 2, "product": "NVIDIA-A100-SXM4-80GB"})
    assert (plan.backend, plan.fraction, plan.memory_bytes) == ("whole", Fraction(2), 160 * GIB)
    assert fields.resources == {"nvidia.com/gpu": "2"}
    assert fields.node_selector == {
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    }


def test_fraction_one_on_time_slicing_is_a_whole_gpu() -> None:
    plan, fields = fields_for({"fraction": 1})
    assert plan.backend == "whole"
    assert fields.resources == {"nvidia.com/gpu": "1"}


def test_cpu_only_hides_gpus() -> None:
    plan, fields = fields_for(None)
    assert plan.backend == "none"
    assert fields.resources == {}
    assert fields.environment == {"NVIDIA_VISIBLE_DEVICES": "void"}


def test_explicit_memory_budget_and_product_memory() -> None:
    defaults = replace(DEFAULTS, memory_by_product={"NVIDIA-A100-SXM4-40GB": 40 * GIB})
    plan = plan_gpu(parse_gpu_spec({"fraction": 0.25, "product": "NVIDIA-A100-SXM4-40GB"}), defaults)
    assert plan.memory_bytes == 10 * GIB
    plan = plan_gpu(parse_gpu_spec({"fraction": 0.25, "memory": "12Gi"}), defaults)
    assert plan.memory_bytes == 12 * GIB


def test_contract_fields() -> None:
    plan, _ = fields_for({"fraction": "1/8"})
    contract = contract_fields(plan, profile="shared", choice="size=eighth", cull=CullPolicy(1800, 0), model=None)
    assert contract.environment == {
        "FRACNB_PROFILE": "shared",
        "FRACNB_CHOICE": "size=eighth",
        "FRACNB_GPU_FRACTION": "0.125",
        "FRACNB_GPU_MEMORY_LIMIT": str(10 * GIB),
        "FRACNB_GPU_BACKEND": "time-slicing",
        "FRACNB_ISOLATION": "none",
    }
    assert contract.labels == {
        "fracnb.io/profile": "shared",
        "fracnb.io/gpu-backend": "time-slicing",
        "fracnb.io/gpu-fraction": "0.125",
    }
    assert contract.annotations == {
        "fracnb.io/profile": "shared",
        "fracnb.io/gpu-fraction": "1/8",
        "fracnb.io/gpu-memory-limit": str(10 * GIB),
        "fracnb.io/choice": "size=eighth",
        "fracnb.io/isolation": "none",
        "fracnb.io/idle-timeout": "1800",
        "fracnb.io/max-age": "0",
    }


def test_contract_carries_the_profiles_display_name() -> None:
    plan, _ = fields_for({"fraction": "1/4"})
    contract = contract_fields(
        plan, profile="quarter", choice="", cull=CullPolicy(0, 0), model=None, display_name=" 1/4 GPU "
    )
    assert contract.environment["FRACNB_PROFILE_DISPLAY_NAME"] == "1/4 GPU"
    blank = contract_fields(plan, profile="quarter", choice="", cull=CullPolicy(0, 0), model=None, display_name=" ")
    assert "FRACNB_PROFILE_DISPLAY_NAME" not in blank.environment


SAMPLE_GPUS = [
    {"count": 2},
    {"count": 1, "backend": "hami"},
    {"count": 1, "backend": "kai"},
    {"fraction": 0.25},
    {"fraction": 0.25, "backend": "mps"},
    {"fraction": 0.5, "backend": "hami"},
    {"fraction": 0.5, "backend": "hami", "memory": "10Gi"},
    {"fraction": 0.25, "backend": "kai"},
    *(
        {"mig_profile": profile, "product": f"NVIDIA-{model.product_patterns[0]}"}
        for model in mig.CATALOGUE
        for profile in model.profiles
    ),
]


@pytest.mark.parametrize(
    "settings",
    [SETTINGS, replace(SETTINGS, time_slicing_resource="example.com/shared-gpu", mps_resource="nvidia.com/gpu")],
)
def test_every_gpu_resource_a_backend_emits_counts_as_gpu(settings: BackendSettings) -> None:
    """The one list of GPU resources and annotations covers everything the backends put in a pod."""
    emitted_resources, emitted_annotations = set(), set()
    for gpu in SAMPLE_GPUS:
        plan = plan_gpu(parse_gpu_spec(gpu), DEFAULTS)
        fields = backend_fields(plan, settings)
        emitted_resources |= set(fields.resources)
        emitted_annotations |= set(fields.annotations)
    assert {"nvidia.com/gpu", "nvidia.com/gpucores", "nvidia.com/mig-1g.10gb.me"} <= emitted_resources
    assert all(is_gpu_resource(name, settings) for name in emitted_resources)
    scheduling = {"nvidia.com/use-gputype", "hami.io/gpu-scheduler-policy"}
    assert emitted_annotations - scheduling <= set(GPU_REQUEST_ANNOTATIONS)
    assert not any(is_gpu_resource(name, settings) for name in ("cpu", "memory", "example.com/fpga", "nvidia.com"))
