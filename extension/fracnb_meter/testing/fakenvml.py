"""Build the fake libnvidia-ml.so.1 and write the state file it simulates GPUs from.

Used by the test suite and by the demo. The C source is ``extension/fakenvml/fakenvml.c``
in the source tree (override with ``FRACNB_FAKENVML_SOURCE``); its header documents the
state file format this module writes.

    library = build(directory)          # compile with the system C compiler
    preload(library)                    # before NVML is first initialised in this process
    write_state(path, FakeState(devices=[FakeDevice.a100(0)]))
    os.environ["FAKE_NVML_STATE"] = str(path)
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

LIBRARY_NAME = "libnvidia-ml.so.1"
GIB = 1 << 30


class FakeNvmlError(RuntimeError):
    """The fake NVML library could not be built or its state could not be read."""


def source_path() -> Path:
    override = os.environ.get("FRACNB_FAKENVML_SOURCE")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[2] / "fakenvml" / "fakenvml.c"


def build(directory: Path, compiler: str | None = None) -> Path:
    """Compile the fake into ``directory/libnvidia-ml.so.1`` (SONAME set) and return its path."""
    source = source_path()
    if not source.is_file():
        raise FakeNvmlError(
            f"fake NVML source not found at {source}; run from a source checkout "
            "or set FRACNB_FAKENVML_SOURCE to the path of fakenvml.c"
        )
    compiler = compiler or os.environ.get("CC") or "cc"
    if shutil.which(compiler) is None:
        raise FakeNvmlError(f"no C compiler {compiler!r} on PATH; install gcc or set CC")
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / LIBRARY_NAME
    command = [compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Werror"]
    command += [f"-Wl,-soname,{LIBRARY_NAME}", "-o", str(target), str(source), "-lpthread"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise FakeNvmlError(f"compiling {source} failed:\n{result.stderr}")
    return target


def preload(library: Path) -> ctypes.CDLL:
    """Load the fake globally, so pynvml's later CDLL('libnvidia-ml.so.1') finds it by SONAME."""
    return ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)


@dataclass
class FakeMig:
    gpu_instance_id: int
    name: str
    uuid: str
    memory_total: int


@dataclass
class FakeDevice:
    name: str
    uuid: str
    memory_total: int
    memory_reserved: int = 0
    memory_used: int | None = None  # None: reserved + the memory of its processes
    utilization_gpu: int = 0
    utilization_memory: int = 0
    mig_mode: int | None = None  # None: not MIG-capable
    migs: dict[int, FakeMig] = field(default_factory=dict)  # slot -> instance

    @classmethod
    def a100(cls, index: int, name: str = "Simulated NVIDIA A100-SXM4-80GB") -> FakeDevice:
        return cls(name=name, uuid=f"GPU-5e1f0000-0000-4000-8000-{index:012d}", memory_total=80 * GIB)


@dataclass
class FakeProcess:
    device: int
    pid: int
    memory: int | None  # None: NVML reports "not available" (as old drivers in containers)
    mig: int | None = None  # MIG slot on the device
    graphics: bool = False


def epoch_us() -> int:
    """Now on the clock NVML stamps utilisation samples with: CPU epoch time in microseconds."""
    return time.time_ns() // 1000


@dataclass
class FakeUtilization:
    """``pid`` keeps ``sm_percent`` of the device's SMs (and ``memory_percent`` of its memory
    bandwidth) busy at every sampling tick from ``start_us`` to ``end_us`` (epoch microseconds,
    see :func:`epoch_us`; None: from before the driver's buffer / still busy). The driver keeps
    about 10 s of ticks, so a process that stopped more than that ago has no samples left."""

    device: int
    pid: int
    sm_percent: int
    memory_percent: int = 0
    start_us: int | None = None
    end_us: int | None = None

    def render(self) -> str:
        value = f"{self.device}:{self.pid}:{self.sm_percent}"
        if self.memory_percent:
            value += f":{self.memory_percent}"
        if self.start_us is not None or self.end_us is not None:
            value += f"@{self.start_us or 0}" + ("" if self.end_us is None else f"-{self.end_us}")
        return value

    @classmethod
    def parse(cls, value: str) -> FakeUtilization:
        percents, _, span = value.partition("@")
        device, pid, sm, *memory = percents.split(":")
        start, _, end = span.partition("-")
        return cls(
            device=int(device),
            pid=int(pid),
            sm_percent=int(sm),
            memory_percent=int(memory[0]) if memory else 0,
            start_us=(int(start) or None) if span else None,
            end_us=int(end) if end else None,
        )


@dataclass
class FakeState:
    driver_version: str = "565.57.01"
    devices: list[FakeDevice] = field(default_factory=list)
    processes: list[FakeProcess] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)  # NVML function -> return code
    release_exited: bool = False  # like a real driver: processes that exited hold no memory
    utilization: list[FakeUtilization] = field(default_factory=list)
    utilization_period_us: int | None = None  # None: the driver's 10 s / 72
    utilization_buffer: int | None = None  # ticks kept; None: 72 (about 10 s)
    host_pid_offset: int = 0  # drivers before 570.86.15: utilisation samples carry pid + this

    def render(self) -> str:
        lines = [f"driver_version={self.driver_version}", f"release_exited={int(self.release_exited)}"]
        if self.utilization_period_us is not None:
            lines.append(f"utilization_period_us={self.utilization_period_us}")
        if self.utilization_buffer is not None:
            lines.append(f"utilization_buffer={self.utilization_buffer}")
        if self.host_pid_offset:
            lines.append(f"host_pid_offset={self.host_pid_offset}")
        for index, device in enumerate(self.devices):
            lines += _device_lines(index, device)
        lines += [f"process={_process_value(p)}" for p in self.processes]
        lines += [f"utilization={u.render()}" for u in self.utilization]
        lines += [f"error.{call}={code}" for call, code in self.errors.items()]
        return "\n".join(lines) + "\n"

    @classmethod
    def parse(cls, text: str) -> FakeState:
        return _parse(text)


def _device_lines(index: int, device: FakeDevice) -> list[str]:
    prefix = f"device.{index}."
    lines = [
        f"{prefix}name={device.name}",
        f"{prefix}uuid={device.uuid}",
        f"{prefix}memory_total={device.memory_total}",
        f"{prefix}memory_reserved={device.memory_reserved}",
        f"{prefix}utilization_gpu={device.utilization_gpu}",
        f"{prefix}utilization_memory={device.utilization_memory}",
    ]
    if device.memory_used is not None:
        lines.append(f"{prefix}memory_used={device.memory_used}")
    if device.mig_mode is not None:
        lines.append(f"{prefix}mig_mode={device.mig_mode}")
    for slot, mig in device.migs.items():
        mig_prefix = f"{prefix}mig.{slot}."
        lines += [
            f"{mig_prefix}gpu_instance_id={mig.gpu_instance_id}",
            f"{mig_prefix}name={mig.name}",
            f"{mig_prefix}uuid={mig.uuid}",
            f"{mig_prefix}memory_total={mig.memory_total}",
        ]
    return lines


def _process_value(process: FakeProcess) -> str:
    where = str(process.device) if process.mig is None else f"{process.device}/{process.mig}"
    memory = "na" if process.memory is None else str(process.memory)
    return f"{where}:{process.pid}:{memory}" + (":graphics" if process.graphics else "")


def _parse_process(value: str) -> FakeProcess:
    where, pid, memory, *kind = value.split(":")
    device, _, mig = where.partition("/")
    return FakeProcess(
        device=int(device),
        pid=int(pid),
        memory=None if memory == "na" else int(memory),
        mig=int(mig) if mig else None,
        graphics=kind == ["graphics"],
    )


def _parse(text: str) -> FakeState:
    state = FakeState()
    devices: dict[int, dict[str, str]] = {}
    for raw in text.splitlines():
        key, sep, value = raw.split("#", 1)[0].strip().partition("=")
        if not sep:
            continue
        if key == "driver_version":
            state.driver_version = value
        elif key == "process":
            state.processes.append(_parse_process(value))
        elif key == "utilization":
            state.utilization.append(FakeUtilization.parse(value))
        elif key == "utilization_period_us":
            state.utilization_period_us = int(value)
        elif key == "utilization_buffer":
            state.utilization_buffer = int(value)
        elif key == "host_pid_offset":
            state.host_pid_offset = int(value)
        elif key == "release_exited":
            state.release_exited = value.strip() == "1"
        elif key.startswith("error."):
            state.errors[key[len("error.") :]] = int(value)
        elif key.startswith("device."):
            index, _, rest = key[len("device.") :].partition(".")
            devices.setdefault(int(index), {})[rest] = value
    state.devices = [_device_from(devices[i]) for i in sorted(devices)]
    return state


def _device_from(fields: dict[str, str]) -> FakeDevice:
    migs: dict[int, dict[str, str]] = {}
    for key, value in fields.items():
        if key.startswith("mig."):
            slot, _, rest = key[len("mig.") :].partition(".")
            migs.setdefault(int(slot), {})[rest] = value
    return FakeDevice(
        name=fields.get("name", ""),
        uuid=fields.get("uuid", ""),
        memory_total=int(fields.get("memory_total", "0")),
        memory_reserved=int(fields.get("memory_reserved", "0")),
        memory_used=int(fields["memory_used"]) if "memory_used" in fields else None,
        utilization_gpu=int(fields.get("utilization_gpu", "0")),
        utilization_memory=int(fields.get("utilization_memory", "0")),
        mig_mode=int(fields["mig_mode"]) if "mig_mode" in fields else None,
        migs={
            slot: FakeMig(
                gpu_instance_id=int(m.get("gpu_instance_id", "0")),
                name=m.get("name", ""),
                uuid=m.get("uuid", ""),
                memory_total=int(m.get("memory_total", "0")),
            )
            for slot, m in sorted(migs.items())
        },
    )


def write_state(path: Path, state: FakeState) -> None:
    """Replace the state file atomically (readers never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w") as stream:
        stream.write(state.render())
    # The library reloads when inode, size or mtime change; coarse kernel timestamps and
    # inode reuse could hide a quick rewrite, so the mtime always moves forward.
    try:
        previous = path.stat().st_mtime_ns
    except FileNotFoundError:
        previous = 0
    stamp = max(time.time_ns(), previous + 1000)
    os.utime(temporary, ns=(stamp, stamp))
    os.replace(temporary, path)


def read_state(path: Path) -> FakeState:
    try:
        return FakeState.parse(path.read_text())
    except (OSError, ValueError) as error:
        raise FakeNvmlError(f"cannot read the fake NVML state file {path}: {error}") from error
