"""Reading the FRACNB_* contract variables."""

from __future__ import annotations

import pytest

from fracnb_meter.contract import NO_GPU_REASON, Budget, ContractError, gpu_withheld, read_budget


def test_full_contract() -> None:
    env = {
        "FRACNB_GPU_FRACTION": "0.125",
        "FRACNB_GPU_MEMORY_LIMIT": "10737418240",
        "FRACNB_ISOLATION": "enforced",
        "FRACNB_GPU_BACKEND": "hami",
        "FRACNB_PROFILE": "eighth",
    }
    assert read_budget(env) == Budget(0.125, 10737418240, "enforced", "hami", "eighth")


def test_no_contract_on_a_workstation() -> None:
    assert read_budget({"HOME": "/home/me"}) == Budget()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("FRACNB_GPU_FRACTION", "quarter", "non-negative decimal"),
        ("FRACNB_GPU_FRACTION", "-1", "non-negative decimal"),
        ("FRACNB_GPU_FRACTION", "nan", "non-negative decimal"),
        ("FRACNB_GPU_MEMORY_LIMIT", "20GiB", "whole number of bytes"),
        ("FRACNB_ISOLATION", "strict", "hard, enforced, per-process, none"),
        ("FRACNB_GPU_BACKEND", "vgpu", "time-slicing"),
        ("FRACNB_SOFT_CAP_BYTES", "19GiB", "whole number of bytes"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str, message: str) -> None:
    with pytest.raises(ContractError, match=message) as caught:
        read_budget({name: value})
    assert name in str(caught.value)


def test_display_name_and_soft_cap() -> None:
    env = {
        "FRACNB_PROFILE": "quarter",
        "FRACNB_PROFILE_DISPLAY_NAME": "Quarter of an A100",
        "FRACNB_GPU_BACKEND": "time-slicing",
        "FRACNB_SOFT_CAP_BYTES": "20401094656",
    }
    budget = read_budget(env)
    assert budget.profile_display_name == "Quarter of an A100"
    assert budget.soft_cap_bytes == 20401094656


@pytest.mark.parametrize(
    ("env", "withheld"),
    [
        ({"FRACNB_GPU_BACKEND": "none"}, True),
        ({"FRACNB_GPU_BACKEND": "time-slicing", "NVIDIA_VISIBLE_DEVICES": "void"}, True),
        ({"NVIDIA_VISIBLE_DEVICES": "none"}, True),
        ({"FRACNB_GPU_BACKEND": "time-slicing", "NVIDIA_VISIBLE_DEVICES": "all"}, False),
        ({}, False),  # a workstation
    ],
)
def test_gpu_withheld(env: dict[str, str], withheld: bool) -> None:
    assert gpu_withheld(read_budget(env), env) == (NO_GPU_REASON if withheld else None)
