"""The demo helper that makes the calling process "use" simulated GPU memory."""

from __future__ import annotations

import os

import pytest

from fracnb_meter import simulate
from fracnb_meter.sampler import Sampler
from fracnb_meter.testing.fakenvml import FakeProcess, read_state
from fracnb_meter.testing.server import StateFile
from tests.meter.meter_helpers import GIB


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2GiB", 2 * GIB), ("512 MiB", 512 << 20), ("1.5GB", 1_500_000_000), ("7", 7), (3, 3)],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert simulate.parse_size(text) == expected


@pytest.mark.parametrize("text", ["two gigs", "2 GiBs", "", "-1GiB"])
def test_parse_size_explains_the_format(text: str) -> None:
    with pytest.raises(simulate.SimulationError, match="such as '2GiB'"):
        simulate.parse_size(text)


def test_allocate_and_release_show_in_nvml(nvml_state: StateFile) -> None:
    assert simulate.allocate("1GiB") == GIB
    assert simulate.allocate(GIB // 2) == GIB + GIB // 2
    sampler = Sampler(0.0)
    try:
        listed = sampler.read().processes
        assert [(p.pid, p.memory_bytes) for p in listed] == [(os.getpid(), GIB + GIB // 2)]
        simulate.release()
        assert sampler.read().processes == ()
    finally:
        sampler.close()


def test_out_of_simulated_memory(nvml_state: StateFile) -> None:
    state = read_state(nvml_state.path)
    state.processes.append(FakeProcess(0, 1, 79 * GIB))
    nvml_state.write(state)
    with pytest.raises(simulate.SimulationError, match="out of simulated GPU memory"):
        simulate.allocate("2GiB")
    with pytest.raises(simulate.SimulationError, match="no simulated GPU 3"):
        simulate.allocate("1GiB", device=3)


def test_refuses_without_a_state_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAKE_NVML_STATE", raising=False)
    with pytest.raises(simulate.SimulationError, match="no simulated GPU here"):
        simulate.allocate("1GiB")


def test_refuses_with_a_real_driver_library(nvml_state: StateFile, monkeypatch: pytest.MonkeyPatch) -> None:
    # Any library without the fake's marker stands for the real libnvidia-ml here.
    monkeypatch.setenv("FAKE_NVML_LIBRARY", "libc.so.6")
    with pytest.raises(simulate.SimulationError, match="real NVIDIA driver library"):
        simulate.allocate("1GiB")
    assert read_state(nvml_state.path).processes == []


@pytest.mark.parametrize(
    "environment",
    [{"FRACNB_GPU_BACKEND": "none"}, {"NVIDIA_VISIBLE_DEVICES": "void"}, {"NVIDIA_VISIBLE_DEVICES": "none"}],
)
def test_refuses_on_a_server_without_a_gpu(
    nvml_state: StateFile, monkeypatch: pytest.MonkeyPatch, environment: dict[str, str]
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(simulate.SimulationError, match=r"No GPU for this server.*GPU profile"):
        simulate.allocate("1GiB")
    assert read_state(nvml_state.path).processes == []


def test_allocation_reads_as_a_sentence(nvml_state: StateFile) -> None:
    total = simulate.allocate("1536MiB")
    assert repr(total) == "this kernel now uses 1.5 GiB of simulated GPU memory on GPU 0"
    assert total == 1536 << 20
    simulate.release()


def test_out_of_memory_names_sizes_readably(nvml_state: StateFile) -> None:
    with pytest.raises(simulate.SimulationError, match=r"100 GiB wanted, 80 GiB free"):
        simulate.allocate("100GiB")
