"""Fixtures for the browser tests: a real Jupyter server on a simulated GPU, and Chromium.

- ``fake_gpu``: the fake libnvidia-ml.so.1, compiled once, and a ``FakeGpu`` whose
  ``set_kernel_memory(pid, bytes)`` rewrites the state file the library reads.
- ``service``: the hub's fracnb service as notebooks see it (``tests/service_reports.py``):
  ``service.scenario = ...`` picks the ``api/me`` report, made by the service's own code.
- ``lab_server``: a ``jupyter lab`` subprocess (token auth, fracnb_meter enabled, the
  fake library on ``LD_LIBRARY_PATH``, a 1/4-GPU budget of 20 GiB in FRACNB_* variables,
  ``FRACNB_SERVICE_URL`` pointing at ``service``).
  The freshly built ``@fracnb/meter`` labextension is put first on ``JUPYTER_PATH``.
- ``browser``: headless Debian Chromium through Playwright (never a downloaded browser).
- ``artifacts``: ``test-artifacts/browser/`` for screenshots.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from meter_lab import (
    BUDGET_ENV,
    CPU_ONLY_ENV,
    REPO,
    FakeGpu,
    LabServer,
    free_port,
    labextension_path,
    wait_until_up,
)

from fracnb_meter.testing import fakenvml
from fracnb_meter.testing.chromium import CHROMIUM, CHROMIUM_ARGS
from tests.service_reports import ReportServer


@pytest.fixture(scope="session")
def artifacts() -> Path:
    directory = REPO / "test-artifacts" / "browser"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture(scope="session")
def fake_gpu(tmp_path_factory: pytest.TempPathFactory) -> FakeGpu:
    tmp = tmp_path_factory.mktemp("fakenvml")
    library = fakenvml.build(tmp / "lib")
    gpu = FakeGpu(state_path=tmp / "state.txt", library_dir=library.parent)
    gpu.write()
    return gpu


@pytest.fixture(scope="session")
def service() -> Iterator[ReportServer]:
    """The hub's fracnb service as the notebook sees it: set ``service.scenario`` to choose
    the report (made by the service's own code); None (the default) answers 503."""
    service = ReportServer.start()
    yield service
    service.stop()


@contextmanager
def running_lab(
    tmp: Path, environment: dict[str, str], log: Path, meter_config: dict[str, object] | None = None
) -> Iterator[LabServer]:
    """``jupyter lab`` with the meter, the fake NVML and ``environment`` (the pod's variables);
    ``meter_config``: more ``c.FracnbMeter`` settings."""
    root, config = tmp / "root", tmp / "config"
    root.mkdir()
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(
        json.dumps(
            {
                "ServerApp": {"jpserver_extensions": {"fracnb_meter": True}},
                # Test latency, not production advice: re-read NVML at most every 0.2 s, ask the
                # hub's service on every sample, and count GPU-unused time in 1 s windows.
                "FracnbMeter": {
                    "sample_interval_floor": 0.2,
                    "service_interval": 0.0,
                    "gpu_unused_window": 1,
                    "gpu_unused_interval": 0.25,
                    **(meter_config or {}),
                },
            }
        )
    )
    # The news prompt is a notification too; keep the toast area for the meter's own.
    (config / "labconfig").mkdir()
    (config / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}})
    )
    port, token = free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        **environment,
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_PATH": str(labextension_path(tmp)),
        "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
    }
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root"]
    command += [f"--ServerApp.port={port}", "--ServerApp.ip=127.0.0.1"]
    command += [f"--ServerApp.root_dir={root}", f"--IdentityProvider.token={token}"]
    with log.open("w") as log_stream:
        process = subprocess.Popen(command, env=env, stdout=log_stream, stderr=subprocess.STDOUT)
    server = LabServer(url=f"http://127.0.0.1:{port}/", token=token, root=root, log=log, pid=process.pid)
    try:
        wait_until_up(server, process)
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def gpu_environment(fake_gpu: FakeGpu) -> dict[str, str]:
    return {"LD_LIBRARY_PATH": str(fake_gpu.library_dir), "FAKE_NVML_STATE": str(fake_gpu.state_path)}


@pytest.fixture(scope="session")
def lab_server(
    tmp_path_factory: pytest.TempPathFactory, fake_gpu: FakeGpu, service: ReportServer, artifacts: Path
) -> Iterator[LabServer]:
    environment = {**BUDGET_ENV, **service.environment(), **gpu_environment(fake_gpu)}
    with running_lab(tmp_path_factory.mktemp("lab"), environment, artifacts / "jupyter-lab.log") as server:
        yield server


@pytest.fixture(scope="module")
def cpu_only_lab_server(
    tmp_path_factory: pytest.TempPathFactory, fake_gpu: FakeGpu, artifacts: Path
) -> Iterator[LabServer]:
    """A CPU-only server as the spawner makes it; the node's (fake) driver library is still there."""
    environment = {**CPU_ONLY_ENV, **gpu_environment(fake_gpu)}
    with running_lab(tmp_path_factory.mktemp("cpu-lab"), environment, artifacts / "jupyter-lab-cpu.log") as server:
        yield server


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `./dev setup` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield instance
        instance.close()
