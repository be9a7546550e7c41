"""The fake NVML library at the C ABI, driven through the real nvidia-ml-py bindings."""

from __future__ import annotations

import ctypes
import inspect
import re

import pynvml
import pytest

from fracnb_meter import nvml as meter_nvml
from fracnb_meter.testing.fakenvml import (
    FakeDevice,
    FakeMig,
    FakeProcess,
    FakeState,
    FakeUtilization,
    epoch_us,
    read_state,
)
from fracnb_meter.testing.server import StateFile
from tests.meter.meter_helpers import GIB


@pytest.fixture
def nvml(nvml_state: StateFile):
    pynvml.nvmlInit()
    yield pynvml
    pynvml.nvmlShutdown()


def mig_device() -> FakeDevice:
    device = FakeDevice.a100(1)
    device.mig_mode = 1
    device.migs = {1: FakeMig(7, "MIG 1g.10gb", "MIG-cccc", 10 * GIB)}
    return device


def test_state_file_round_trip() -> None:
    state = FakeState(
        driver_version="550.54.15",
        devices=[FakeDevice.a100(0), mig_device()],
        processes=[
            FakeProcess(0, 11, GIB),
            FakeProcess(1, 12, None, mig=1),
            FakeProcess(0, 13, 5, graphics=True),
        ],
        errors={"nvmlDeviceGetName": 3},
        utilization=[
            FakeUtilization(0, 11, 40),
            FakeUtilization(0, 12, 0, memory_percent=3, start_us=1_700_000_000_000_000),
            FakeUtilization(0, 13, 9, end_us=1_700_000_005_000_000),
        ],
        utilization_period_us=100_000,
        utilization_buffer=100,
        host_pid_offset=4096,
    )
    assert FakeState.parse(state.render()) == state


def test_per_process_utilisation_samples(nvml_state: StateFile, nvml) -> None:
    """Samples as NVML gives them: none is NOT_FOUND; idle processes are not listed; the meter reads busy pids."""
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetProcessUtilization(handle, 0)
    assert meter_nvml.read_devices(nvml, 0).busy_pids == frozenset()
    utilization = [FakeUtilization(0, 11, 40), FakeUtilization(0, 12, 0), FakeUtilization(0, 13, 0, memory_percent=5)]
    nvml_state.write(FakeState(devices=[FakeDevice.a100(0)], utilization=utilization))
    samples = nvml.nvmlDeviceGetProcessUtilization(handle, 0)
    # "One utilization sample structure is returned per process ... that had some non-zero utilization"
    assert sorted((s.pid, s.smUtil, s.memUtil) for s in samples) == [(11, 40, 0), (13, 0, 5)]
    reading = meter_nvml.read_devices(nvml, 0)
    assert reading.busy_pids == frozenset({11, 13})  # a copy (memory bandwidth only) is GPU work too
    assert reading.utilization_stamp == max(s.timeStamp for s in samples)
    assert meter_nvml.read_devices(nvml).busy_pids is None  # not asked for


def test_samples_sit_on_the_sampling_ticks_one_per_process(nvml_state: StateFile, nvml) -> None:
    period = 250_000
    now = epoch_us()
    utilization = [FakeUtilization(0, 21, 30), FakeUtilization(0, 21, 70, end_us=now - 3_000_000)]
    nvml_state.write(FakeState(devices=[FakeDevice.a100(0)], utilization=utilization, utilization_period_us=period))
    (sample,) = nvml.nvmlDeviceGetProcessUtilization(nvml.nvmlDeviceGetHandleByIndex(0), 0)
    # The newest tick wins: the process is busy at 30 % now, its 70 % stretch ended 3 s ago.
    assert (sample.pid, sample.smUtil) == (21, 30)
    assert sample.timeStamp % period == 0
    assert now - period <= sample.timeStamp <= epoch_us()


def test_last_seen_timestamp_returns_only_newer_samples(nvml_state: StateFile, nvml) -> None:
    now = epoch_us()
    finished = FakeUtilization(0, 31, 50, start_us=now - 5_000_000, end_us=now - 2_000_000)
    nvml_state.write(FakeState(devices=[FakeDevice.a100(0)], utilization=[finished]))
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    (sample,) = nvml.nvmlDeviceGetProcessUtilization(handle, 0)
    assert finished.start_us <= sample.timeStamp <= finished.end_us
    with pytest.raises(nvml.NVMLError_NotFound):  # nothing newer than what was seen
        nvml.nvmlDeviceGetProcessUtilization(handle, sample.timeStamp)
    # An older "last seen" gets the newest sample again, as long as the buffer still holds it.
    (again,) = nvml.nvmlDeviceGetProcessUtilization(handle, sample.timeStamp - 1)
    assert again.timeStamp == sample.timeStamp


def test_the_buffer_holds_about_ten_seconds(nvml_state: StateFile, nvml) -> None:
    now = epoch_us()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    recent = FakeUtilization(0, 41, 60, start_us=now - 60_000_000, end_us=now - 8_000_000)
    old = FakeUtilization(0, 42, 60, start_us=now - 60_000_000, end_us=now - 12_000_000)
    nvml_state.write(FakeState(devices=[FakeDevice.a100(0)], utilization=[recent, old]))
    assert [s.pid for s in nvml.nvmlDeviceGetProcessUtilization(handle, 0)] == [41]  # 72 ticks of 10/72 s
    nvml_state.write(FakeState(devices=[FakeDevice.a100(0)], utilization=[recent, old], utilization_buffer=36))
    with pytest.raises(nvml.NVMLError_NotFound):  # half the ring: about 5 s
        nvml.nvmlDeviceGetProcessUtilization(handle, 0)


def test_drivers_before_570_86_15_give_host_pids(nvml_state: StateFile, nvml) -> None:
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    for driver, pid in (("565.57.01", 100_051), ("570.86.14", 100_051), ("570.86.15", 51), ("580.65.06", 51)):
        nvml_state.write(FakeState(driver_version=driver, devices=[FakeDevice.a100(0)],
                                   utilization=[FakeUtilization(0, 51, 10)], host_pid_offset=100_000))  # fmt: skip
        assert [s.pid for s in nvml.nvmlDeviceGetProcessUtilization(handle, 0)] == [pid], driver


def test_no_utilisation_samples_on_mig(nvml_state: StateFile, nvml) -> None:
    nvml_state.write(FakeState(devices=[FakeDevice.a100(0), mig_device()], utilization=[FakeUtilization(1, 61, 90)]))
    parent = nvml.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetProcessUtilization(parent, 0)
    with pytest.raises(nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetProcessUtilization(nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 1), 0)
    reading = meter_nvml.read_devices(nvml, 0)
    assert reading.available
    # Work on the MIG instances would go unseen: whose work there is, is unknown.
    assert (reading.busy_pids, reading.utilization_reason) == (None, meter_nvml.MIG_NO_SAMPLES)


def test_utilisation_errors_are_injectable(nvml_state: StateFile, nvml) -> None:
    nvml_state.write(FakeState(devices=[FakeDevice.a100(0)], utilization=[FakeUtilization(0, 71, 10)],
                               errors={"nvmlDeviceGetProcessUtilization": 999}))  # fmt: skip
    with pytest.raises(nvml.NVMLError_Unknown):
        nvml.nvmlDeviceGetProcessUtilization(nvml.nvmlDeviceGetHandleByIndex(0), 0)
    reading = meter_nvml.read_devices(nvml, 0)
    assert reading.available  # memory is still read; only whose GPU work it was is unknown
    assert reading.busy_pids is None
    assert "NVML failed" in (reading.utilization_reason or "")


def test_the_versioned_utilisation_query(nvml_state: StateFile, nvml) -> None:
    """nvmlDeviceGetProcessesUtilizationInfo (NVML 12.4+): the same samples in the versioned struct."""
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetProcessesUtilizationInfo(handle, 0)
    nvml_state.write(FakeState(devices=[FakeDevice.a100(0)],
                               utilization=[FakeUtilization(0, 81, 35, memory_percent=4), FakeUtilization(0, 82, 5)]))  # fmt: skip
    infos = nvml.nvmlDeviceGetProcessesUtilizationInfo(handle, 0)
    assert sorted((i.pid, i.smUtil, i.memUtil) for i in infos) == [(81, 35, 4), (82, 5, 0)]
    newest = max(i.timeStamp for i in infos)
    assert newest == max(s.timeStamp for s in nvml.nvmlDeviceGetProcessUtilization(handle, 0))


def test_devices_memory_and_processes(nvml_state: StateFile, nvml) -> None:
    device = FakeDevice.a100(0)
    device.memory_reserved = GIB // 2
    device.utilization_gpu = 42
    nvml_state.write(FakeState(devices=[device], processes=[FakeProcess(0, 100, GIB), FakeProcess(0, 101, None)]))
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlSystemGetDriverVersion() == "565.57.01"
    assert nvml.nvmlDeviceGetCount() == 1
    assert nvml.nvmlDeviceGetName(handle) == device.name
    assert nvml.nvmlDeviceGetUUID(handle) == device.uuid
    memory = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
    assert (memory.total, memory.reserved, memory.used) == (80 * GIB, GIB // 2, GIB)
    assert nvml.nvmlDeviceGetMemoryInfo(handle).used == GIB + GIB // 2  # v1 includes reserved
    listed = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    assert [(p.pid, p.usedGpuMemory) for p in listed] == [(100, GIB), (101, None)]
    assert listed[0].gpuInstanceId == 0xFFFFFFFF
    assert nvml.nvmlDeviceGetGraphicsRunningProcesses(handle) == []
    assert nvml.nvmlDeviceGetUtilizationRates(handle).gpu == 42
    with pytest.raises(nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetMigMode(handle)


def test_process_list_grows_through_the_insufficient_size_protocol(nvml_state: StateFile, nvml) -> None:
    many = [FakeProcess(0, 1000 + i, i) for i in range(300)]
    nvml_state.write(FakeState(devices=[FakeDevice.a100(0)], processes=many))
    listed = nvml.nvmlDeviceGetComputeRunningProcesses(nvml.nvmlDeviceGetHandleByIndex(0))
    assert [p.pid for p in listed] == [p.pid for p in many]


def test_mig_handles(nvml_state: StateFile, nvml) -> None:
    nvml_state.write(
        FakeState(
            devices=[FakeDevice.a100(0), mig_device()],
            processes=[FakeProcess(1, 77, 3 * GIB, mig=1)],
        )
    )
    parent = nvml.nvmlDeviceGetHandleByIndex(1)
    assert nvml.nvmlDeviceGetMigMode(parent) == [1, 1]
    with pytest.raises(nvml.NVMLError_NotFound):  # empty slot before the used one
        nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 1)
    assert nvml.nvmlDeviceGetGpuInstanceId(mig) == 7
    assert nvml.nvmlDeviceGetUUID(mig) == "MIG-cccc"
    assert nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)) == (
        nvml.nvmlDeviceGetUUID(parent)
    )
    listed = nvml.nvmlDeviceGetComputeRunningProcesses(mig)
    assert [(p.pid, p.usedGpuMemory, p.gpuInstanceId) for p in listed] == [(77, 3 * GIB, 7)]
    with pytest.raises(nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetUtilizationRates(mig)


def test_rewritten_state_is_seen_at_once(nvml_state: StateFile, nvml) -> None:
    for count in (1, 3, 2):
        nvml_state.write(FakeState(devices=[FakeDevice.a100(i) for i in range(count)]))
        assert nvml.nvmlDeviceGetCount() == count


def test_injected_error_and_uninitialised_calls(nvml_state: StateFile) -> None:
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()
    nvml_state.write(FakeState(devices=[FakeDevice.a100(0)], errors={"nvmlDeviceGetName": 3}))
    pynvml.nvmlInit()
    try:
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
    finally:
        pynvml.nvmlShutdown()


def test_every_nvml_function_the_meter_calls_is_exported(fake_nvml_loaded) -> None:
    library = ctypes.CDLL(str(fake_nvml_loaded))
    called = set(re.findall(r"nvml\.(nvml[A-Za-z0-9_]+)\(", inspect.getsource(meter_nvml)))
    assert "nvmlDeviceGetComputeRunningProcesses" in called
    # pynvml's Python names resolve these C symbols in nvidia-ml-py 13.x.
    versioned = {
        "nvmlInit": "nvmlInitWithFlags",
        "nvmlDeviceGetCount": "nvmlDeviceGetCount_v2",
        "nvmlDeviceGetHandleByIndex": "nvmlDeviceGetHandleByIndex_v2",
        "nvmlDeviceGetComputeRunningProcesses": "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses": "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "nvmlDeviceGetMemoryInfo": "nvmlDeviceGetMemoryInfo_v2",
    }
    missing = [name for name in called if not hasattr(library, versioned.get(name, name))]
    assert missing == []


def test_read_state_explains_a_broken_file(tmp_path) -> None:
    path = tmp_path / "state"
    path.write_text("process=zero:1:2\n")
    with pytest.raises(Exception, match="cannot read the fake NVML state file"):
        read_state(path)
