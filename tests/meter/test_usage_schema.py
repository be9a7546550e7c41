"""The usage document against usage.schema.json, in the states the other meter tests do not reach.

``MeterServer.usage()`` checks every answer of the real server extension against the schema,
so the tests in test_server.py (kernels, MIG, old drivers, NVML errors, no GPU) check it too.
Here: a malformed budget, every quota and culling state of the hub's fracnb service (its own
code makes the reports, see tests/service_reports.py), an answer from another service
version, and the in-kernel widget's document.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fracnb_meter.hubservice import report_from_me
from fracnb_meter.testing.fakenvml import FakeDevice, FakeState
from fracnb_meter.testing.server import MeterServer, StateFile, start_server
from fracnb_meter.widget import LocalUsage
from fracnb_schemas import USAGE, problems
from tests.meter.meter_helpers import QUARTER_CONTRACT
from tests.service_reports import SCENARIOS, ReportServer, report

GIB = 1 << 30
BUDGET = {**QUARTER_CONTRACT, "FRACNB_CHOICE": ""}


@pytest.fixture(scope="module")
def hub_server(
    service: ReportServer, fake_nvml_library: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MeterServer]:
    """A server whose FRACNB_SERVICE_URL is the report server; it asks on every request."""
    tmp_path = tmp_path_factory.mktemp("hub-server")
    state = StateFile(tmp_path / "nvml-state")
    state.write(FakeState(devices=[FakeDevice.a100(0)]))
    server = start_server(
        tmp_path,
        fake_nvml_library,
        state,
        meter_config={"sample_interval_floor": 0.0, "service_interval": 0.0},
        extra_env=BUDGET | service.environment(),
    )
    yield server
    server.stop()


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_each_service_report_reaches_the_usage_document(
    service: ReportServer, hub_server: MeterServer, name: str
) -> None:
    service.scenario = SCENARIOS[name]
    try:
        usage = hub_server.usage()  # checked against the schema
    finally:
        service.scenario = None
    quota, cull = report_from_me(await report(SCENARIOS[name]), "")
    assert (usage["quota"], usage["cull"]) == (quota, cull)
    assert usage["cull"] is not None


def test_an_answer_from_another_service_version_means_no_quota(service: ReportServer, hub_server: MeterServer) -> None:
    service.raw = b'{"user": "ann", "quota": {"gpus": null, "exact": null}, "culling": {}}'
    try:
        usage = hub_server.usage()
    finally:
        service.raw = None
    assert (usage["quota"], usage["cull"]) == (None, None)
    assert "ignoring the fracnb service's answer" in hub_server.log.read_text()


def test_a_malformed_budget_is_an_error_in_the_document(tmp_path: Path, fake_nvml_library: Path) -> None:
    state = StateFile(tmp_path / "nvml-state")
    state.write(FakeState(devices=[FakeDevice.a100(0)]))
    env = BUDGET | {"FRACNB_GPU_BACKEND": "vgpu"}
    server = start_server(tmp_path, fake_nvml_library, state, extra_env=env)
    try:
        budget = server.usage()["budget"]
    finally:
        server.stop()
    assert budget["error"] is not None
    assert "FRACNB_GPU_BACKEND='vgpu'" in budget["error"]
    assert [budget[key] for key in ("fraction", "memory_bytes", "isolation", "backend", "profile")] == [None] * 5


def test_the_widget_document_fits_the_schema(nvml_state: StateFile, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in BUDGET.items():
        monkeypatch.setenv(name, value)
    document = LocalUsage(floor_seconds=0.0)()
    assert problems(USAGE, document, check_formats=True) == []
    assert document["budget"]["memory_bytes"] == 20 * GIB
