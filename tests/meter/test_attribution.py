"""Attribution rules: ancestry, driver support, and what may honestly be reported; and the process table
look-ups they walk."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from fracnb_meter.attribution import (
    Owner,
    attribute,
    find_owners,
    parse_driver_version,
    per_process_support,
    per_process_utilization_support,
)
from fracnb_meter.contract import Budget
from fracnb_meter.nvml import Gpu, GpuProcess, GpuReading
from fracnb_meter.processes import looks_like_container, parent_pid, parents_for_one_reading
from fracnb_meter.usage import KernelInfo, build_usage
from fracnb_testbed.procs import wait_until

SERVER, KERNEL_A, KERNEL_B = 10, 20, 30
# pid -> parent: 21 and 22 under kernel A (22 a grandchild), 40 a server child, 99 elsewhere
PARENTS = {SERVER: 1, KERNEL_A: SERVER, 21: KERNEL_A, 22: 21, KERNEL_B: SERVER, 40: SERVER, 99: 1}


def test_owners_follow_the_process_tree() -> None:
    owners = find_owners([22, 21, KERNEL_B, 40, 99, 12345], {KERNEL_A, KERNEL_B}, SERVER, PARENTS.get)
    assert owners[22] == Owner(kernel_pid=KERNEL_A, in_server=True)
    assert owners[21] == Owner(kernel_pid=KERNEL_A, in_server=True)
    assert owners[KERNEL_B] == Owner(kernel_pid=KERNEL_B, in_server=True)
    assert owners[40] == Owner(kernel_pid=None, in_server=True)
    assert owners[99] == Owner(kernel_pid=None, in_server=False)
    assert owners[12345] == Owner(kernel_pid=None, in_server=False)  # vanished process


def test_a_kernel_started_by_a_kernel_owns_its_own_processes() -> None:
    parents = {**PARENTS, 50: KERNEL_A, 51: 50}
    owners = find_owners([51], {KERNEL_A, 50}, SERVER, parents.get)
    assert owners[51].kernel_pid == 50


@pytest.mark.parametrize(
    ("text", "expected"),
    [("565.57.01", (565, 57, 1)), ("550.54.15", (550, 54, 15)), ("580.65", (580, 65)), ("x", ())],
)
def test_parse_driver_version(text: str, expected: tuple[int, ...]) -> None:
    assert parse_driver_version(text) == expected


@pytest.mark.parametrize(
    ("driver", "container", "supported"),
    [
        ("535.183.01", True, False),
        ("560.35.03", True, False),
        ("565.57.01", True, True),
        ("590.44.01", True, True),
        ("535.183.01", False, True),
    ],
)
def test_per_process_support(driver: str, container: bool, supported: bool) -> None:
    ok, reason = per_process_support(driver, container)
    assert ok is supported
    assert (reason is None) is supported


@pytest.mark.parametrize(
    ("driver", "container", "supported"),
    [
        ("565.57.01", True, False),  # per-process memory, but host pids in utilisation samples
        ("565.77", True, False),
        ("570.86.14", True, False),
        ("570.86.15", True, True),
        ("580.65.06", True, True),
        ("565.57.01", False, True),  # outside a container, host pids are ours
    ],
)
def test_per_process_utilization_support(driver: str, container: bool, supported: bool) -> None:
    ok, reason = per_process_utilization_support(driver, container)
    assert ok is supported
    assert (reason is None) is supported
    if not supported:
        assert driver in (reason or "")
        assert "570.86.15" in (reason or "")


def processes(*pairs: tuple[int, int | None]) -> list[GpuProcess]:
    return [GpuProcess(pid, memory, "GPU-x") for pid, memory in pairs]


def test_unknown_memory_is_never_summed_as_zero() -> None:
    listed = processes((KERNEL_A, 100), (21, None), (KERNEL_B, 5))
    owners = find_owners([KERNEL_A, 21, KERNEL_B], {KERNEL_A, KERNEL_B}, SERVER, PARENTS.get)
    result = attribute(
        processes=listed,
        device_used_bytes=1000,
        owners=owners,
        kernel_pids=[KERNEL_A, KERNEL_B],
        per_process=True,
        devices_are_ours=False,
    )
    assert result.per_kernel == {KERNEL_A: None, KERNEL_B: 5}
    assert result.server_bytes is None
    assert result.other_tenants_bytes is None
    assert "no memory figure" in result.reason


def test_without_per_process_memory_only_exclusive_devices_give_a_server_total() -> None:
    common = {"processes": [], "device_used_bytes": 700, "owners": {}, "kernel_pids": [KERNEL_A]}
    shared = attribute(**common, per_process=False, devices_are_ours=False)
    exclusive = attribute(**common, per_process=False, devices_are_ours=True)
    assert shared.server_bytes is None
    assert exclusive.server_bytes == 700
    assert exclusive.per_kernel == {KERNEL_A: None}


def test_build_usage_with_hard_isolation_and_an_old_driver() -> None:
    gpu = Gpu(0, "GPU", "GPU-x", 1000, 600, 3)
    reading = GpuReading(True, None, "550.54.15", False, (gpu,), tuple(processes((KERNEL_A, None))))
    kernel = KernelInfo("k1", "python3", "a.ipynb", "a.ipynb", "idle", KERNEL_A)
    remote = KernelInfo("k2", "python3", None, None, "idle", None)
    document = build_usage(
        reading=reading,
        kernels=[kernel, remote],
        server_pid=SERVER,
        parent_of=PARENTS.get,
        budget=Budget(fraction=1.0, memory_bytes=1000, isolation="hard", backend="whole"),
        budget_error=None,
        in_container=True,
        sampled_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
    )
    assert document["per_process_memory"] is False
    assert document["server"] == {"gpu_memory_bytes": 600}
    assert [k["gpu_memory_bytes"] for k in document["kernels"]] == [None, None]
    assert document["reason"].startswith("NVIDIA driver 550.54.15")
    assert document["sampled_at"] == "2026-01-01T00:00:00.000000+00:00"


def test_container_detection() -> None:
    assert looks_like_container({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, lambda _p: False)
    assert looks_like_container({}, lambda path: path == "/.dockerenv")
    assert not looks_like_container({}, lambda _p: False)


def test_parent_pid_reads_the_process_table_and_says_none_for_a_gone_process() -> None:
    # A command name with spaces and parentheses, as /proc/<pid>/stat writes it between parentheses.
    child = subprocess.Popen(
        [sys.executable, "-c", "open('/proc/self/comm', 'w').write('a) b (c'); import time; time.sleep(60)"]
    )
    try:
        wait_until(
            lambda: Path(f"/proc/{child.pid}/comm").read_text().strip() == "a) b (c", what="the new name", timeout=30
        )
        assert parent_pid(child.pid) == os.getpid()
    finally:
        child.kill()
        child.wait()
    assert parent_pid(child.pid) is None
    assert parent_pid(os.getpid()) == os.getppid()


def test_one_readings_parents_are_read_once_each() -> None:
    parent_of = parents_for_one_reading()
    assert parent_of(os.getpid()) == os.getppid()
    assert parent_of(os.getpid()) == os.getppid()
    assert parent_of.cache_info().hits == 1
    assert parents_for_one_reading().cache_info().currsize == 0  # the next reading asks again
