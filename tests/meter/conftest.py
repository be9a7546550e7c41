"""Fixtures for the meter: the fake NVML library (compiled here), its state, a real server.

The real jupyter_server runs as a subprocess with the fake ``libnvidia-ml.so.1`` found
through LD_LIBRARY_PATH, exactly as a driver library would be; its kernels are real
ipykernel processes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fracnb_meter.testing.fakenvml import FakeDevice, FakeState, build, preload
from fracnb_meter.testing.server import MeterServer, StateFile, start_server
from tests.meter.meter_helpers import GIB, QUARTER_CONTRACT, Kernel, evaluate
from tests.service_reports import ReportServer


@pytest.fixture(scope="session")
def fake_nvml_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake libnvidia-ml.so.1, compiled with the system C compiler (fails without one)."""
    return build(tmp_path_factory.mktemp("fakenvml"))


@pytest.fixture(scope="session")
def fake_nvml_loaded(fake_nvml_library: Path) -> Path:
    """The fake loaded into this test process (it stays loaded: a library cannot be unloaded)."""
    preload(fake_nvml_library)
    return fake_nvml_library


@pytest.fixture
def nvml_state(fake_nvml_loaded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StateFile:
    """A state file for the in-process fake; starts with one simulated A100 and no processes."""
    state = StateFile(tmp_path / "nvml-state")
    state.write(FakeState(devices=[FakeDevice.a100(0)]))
    monkeypatch.setenv("FAKE_NVML_STATE", str(state.path))
    return state


@pytest.fixture(scope="module")
def service() -> Iterator[ReportServer]:
    """The hub's fracnb service as the meter meets it (the stand-in of tests/service_reports.py), one per module."""
    service = ReportServer.start()
    yield service
    service.stop()


@pytest.fixture(scope="session")
def meter_server(fake_nvml_library: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeterServer]:
    """A server in 'container' mode with the fake NVML and a budget from the contract."""
    tmp_path = tmp_path_factory.mktemp("server")
    state = StateFile(tmp_path / "nvml-state")
    state.write(FakeState(devices=[FakeDevice.a100(0)]))
    contract = {
        **QUARTER_CONTRACT,
        "FRACNB_PROFILE_DISPLAY_NAME": "Quarter of an A100",
        "FRACNB_SOFT_CAP_BYTES": str(19 * GIB),
    }
    server = start_server(
        tmp_path,
        fake_nvml_library,
        state,
        meter_config={"sample_interval_floor": 0.0, "activity_interval": 0.3, "in_container": True},
        extra_env=contract,
    )
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kernels(meter_server: MeterServer) -> dict[str, Kernel]:
    """Two notebooks with running kernels, by notebook name."""
    found = {}
    for notebook in ("analysis.ipynb", "train.ipynb"):
        kernel_id = meter_server.start_session(notebook)
        client = meter_server.client(kernel_id)
        pid = int(evaluate(client, "os.getpid()", "import os"))
        found[notebook] = Kernel(kernel_id, pid, client)
    return found
