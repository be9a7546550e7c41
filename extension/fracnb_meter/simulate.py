"""Pretend the calling process uses GPU memory, on simulated GPUs only (demo and tests).

In a notebook served with the fake NVML library (``FAKE_NVML_STATE`` set and the fake
``libnvidia-ml.so.1`` loadable)::

    import fracnb_meter.simulate as sim
    sim.allocate("2GiB")   # this kernel now "uses" 2 GiB on GPU 0
    sim.release()          # and gives it back

On a machine with a real NVIDIA driver every call refuses with SimulationError.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .contract import Budget, ContractError, gpu_withheld, read_budget
from .testing.fakenvml import FakeProcess, FakeState, read_state, write_state
from .wording import format_bytes

UNITS = {"": 1, "B": 1, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}
UNITS |= {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


class Allocation(int):
    """This process's simulated total in bytes, shown in a notebook as a sentence, not a raw count."""

    device: int
    mig: int | None

    def __new__(cls, total: int, device: int = 0, mig: int | None = None) -> Allocation:
        allocation = super().__new__(cls, total)
        allocation.device, allocation.mig = device, mig
        return allocation

    def __repr__(self) -> str:
        where = f"GPU {self.device}" + ("" if self.mig is None else f", MIG instance {self.mig}")
        return f"this kernel now uses {format_bytes(int(self))} of simulated GPU memory on {where}"

    __str__ = __repr__


class SimulationError(RuntimeError):
    """Simulated GPU memory cannot be allocated (not simulated, bad size, or out of memory)."""


def parse_size(size: str | int) -> int:
    """'2GiB', '512 MiB', '1.5GB' or a number of bytes -> bytes."""
    if isinstance(size, int):
        if size < 0:
            raise SimulationError(f"size {size} is negative; give bytes >= 0 or e.g. '2GiB'")
        return size
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", size)
    unit = match.group(2).upper() if match else None
    if match is None or unit not in UNITS:
        raise SimulationError(
            f"cannot read size {size!r}; write a number and a unit such as '2GiB', "
            f"'512MiB' or '1.5GB' (units: {', '.join(u for u in UNITS if u)})"
        )
    return int(float(match.group(1)) * UNITS[unit])


def state_path() -> Path:
    """The fake's state file; refuses on a server without a GPU, and unless the fake library is
    what NVML would load."""
    try:
        budget = read_budget(os.environ)
    except ContractError:
        budget = Budget()  # the meter reports the bad variable; only the GPU's presence matters here
    reason = gpu_withheld(budget, os.environ)
    if reason is not None:
        raise SimulationError(f"{reason} Simulated GPU memory needs a server started with a GPU profile.")
    path = os.environ.get("FAKE_NVML_STATE")
    if not path or not Path(path).is_file():
        raise SimulationError(
            "no simulated GPU here: FAKE_NVML_STATE does not name a state file "
            "(simulation only works on servers started by the fracnb demo or tests)"
        )
    library_name = os.environ.get("FAKE_NVML_LIBRARY", "libnvidia-ml.so.1")
    try:
        library = ctypes.CDLL(library_name)
    except OSError as error:
        raise SimulationError(f"cannot load {library_name}: {error}") from error
    if not hasattr(library, "fakenvml_version"):
        raise SimulationError(f"{library_name} is a real NVIDIA driver library; refusing to simulate GPU memory")
    return Path(path)


@contextmanager
def _locked_state() -> Iterator[tuple[Path, FakeState]]:
    path = state_path()
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield path, read_state(path)


def _capacity(state: FakeState, device: int, mig: int | None) -> int:
    if not 0 <= device < len(state.devices):
        raise SimulationError(f"no simulated GPU {device}; there are {len(state.devices)}")
    gpu = state.devices[device]
    if mig is None:
        return gpu.memory_total - gpu.memory_reserved
    if mig not in gpu.migs:
        raise SimulationError(f"simulated GPU {device} has no MIG instance in slot {mig}")
    return gpu.migs[mig].memory_total


def allocate(size: str | int, device: int = 0, mig: int | None = None) -> Allocation:
    """Add ``size`` to this process's simulated memory on a device; returns its new total
    (an int of bytes that a notebook shows as a sentence)."""
    wanted = parse_size(size)
    pid = os.getpid()
    with _locked_state() as (path, state):
        same_place = [p for p in state.processes if (p.device, p.mig) == (device, mig)]
        used = sum(p.memory or 0 for p in same_place)
        free = _capacity(state, device, mig) - used
        if wanted > free:
            raise SimulationError(
                f"out of simulated GPU memory: {format_bytes(wanted)} wanted, {format_bytes(free)} free"
            )
        mine = next((p for p in same_place if p.pid == pid), None)
        if mine is None:
            mine = FakeProcess(device=device, pid=pid, memory=0, mig=mig)
            state.processes.append(mine)
        mine.memory = (mine.memory or 0) + wanted
        write_state(path, state)
        return Allocation(mine.memory, device, mig)


def release() -> None:
    """Forget all simulated memory of this process."""
    pid = os.getpid()
    with _locked_state() as (path, state):
        state.processes = [p for p in state.processes if p.pid != pid]
        write_state(path, state)
