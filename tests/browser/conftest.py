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

from collections.abc import Iterator
from pathlib import Path

import pytest

from fracnb_meter.testing import fakenvml
from fracnb_meter.testing.chromium import CHROMIUM, CHROMIUM_ARGS
from tests.browser.meter_lab import BUDGET_ENV, CPU_ONLY_ENV, REPO, FakeGpu, LabServer, gpu_environment, running_lab
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
