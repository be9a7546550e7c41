"""Reading the FRACNB_* contract variables."""

from __future__ import annotations

import pytest

from fracnb_meter.contract import Budget, ContractError, read_budget


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
    ],
)
def test_bad_values_name_the_variable(name: str, value: str, message: str) -> None:
    with pytest.raises(ContractError, match=message) as caught:
        read_budget({name: value})
    assert name in str(caught.value)
