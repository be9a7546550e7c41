"""Tests on a real NVIDIA GPU (marker ``gpu``): skipped unless NVML finds a real device.

Everything they need is in this directory plus the installed ``fracnb[notebook]``: copy the
repository (or just ``tests/gpu`` and ``pyproject.toml``'s pytest settings) to a GPU machine and
run ``python -m pytest tests/gpu -m gpu``. The processes that hold GPU memory use the CUDA
driver library through ctypes (cuda_alloc.py), so no framework has to be installed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def real_gpu_reason() -> str | None:
    """Why there is no real GPU here, or None when NVML finds one (and it is not the project's fake)."""
    try:
        import pynvml
    except ImportError:
        return "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        return f"NVML finds no driver ({error})"
    try:
        if hasattr(pynvml.nvmlLib, "fakenvml_version"):
            return "the loaded libnvidia-ml is the project's fake"
        if pynvml.nvmlDeviceGetCount() == 0:
            return "NVML finds no device"
    finally:
        pynvml.nvmlShutdown()
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi is not on PATH"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    for item in items:
        if HERE in Path(item.fspath).parents:
            item.add_marker(pytest.mark.gpu)
            reason = reason or real_gpu_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"no real GPU: {reason}"))


def smi_memory_by_pid() -> dict[int, int]:
    """nvidia-smi's used memory per compute process, in bytes (it reports MiB)."""
    output = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    found = {}
    for line in output.strip().splitlines():
        pid, used = (part.strip() for part in line.split(","))
        found[int(pid)] = int(used) << 20
    return found


@pytest.fixture
def hold_gpu_memory() -> Iterator[Callable[[int], subprocess.Popen[str]]]:
    """Start a process holding ``mib`` MiB on device 0; returns once the memory is allocated."""
    started: list[subprocess.Popen[str]] = []

    def start(mib: int) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, str(HERE / "cuda_alloc.py"), str(mib)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        started.append(process)
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("ready"), f"cuda_alloc.py did not allocate {mib} MiB: {line!r}"
        return process

    yield start
    for process in started:
        if process.stdin:
            process.stdin.close()
        process.wait(30)
        if process.stdout:
            process.stdout.close()
