"""The meter passes the hub's advice for next time to the panel: a real jupyter server on the fake
NVML asks the service stand-in of tests/service_reports.py, whose answers are the service's own
(``advice_document`` over the sessions reported to it); the real endpoint is tested in tests/service.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fracnb_meter.nextadvice import advice_request, parse_advice
from fracnb_meter.testing.fakenvml import FakeDevice, FakeProcess, FakeState
from fracnb_meter.testing.server import MeterServer, StateFile, start_server
from fracnb_testbed.procs import wait_until
from tests.meter.meter_helpers import GIB, evaluate
from tests.service_reports import ReportServer, past_session

BUDGET = 20 * GIB
QUARTER = {
    "FRACNB_GPU_FRACTION": "0.25",
    "FRACNB_GPU_MEMORY_LIMIT": str(BUDGET),
    "FRACNB_ISOLATION": "none",
    "FRACNB_GPU_BACKEND": "time-slicing",
    "FRACNB_PROFILE": "quarter",
    "FRACNB_CHOICE": "",
}
CONFIG = {
    "sample_interval_floor": 0.0,
    "service_interval": 0.0,
    "activity_interval": 0,
    "in_container": True,
    "session_sample_interval": 0.1,
    "session_report_interval": 0.3,
}


@pytest.fixture
def service() -> Iterator[ReportServer]:
    service = ReportServer.start()
    yield service
    service.stop()


def run_server(tmp_path: Path, library: Path, env: dict[str, str]) -> MeterServer:
    state = StateFile(tmp_path / "nvml-state")
    state.write(FakeState(devices=[FakeDevice.a100(0)]))
    return start_server(tmp_path, library, state, meter_config=CONFIG, extra_env=env)


@pytest.fixture
def server(fake_nvml_library: Path, tmp_path: Path, service: ReportServer) -> Iterator[MeterServer]:
    server = run_server(tmp_path, fake_nvml_library, {**QUARTER, **service.environment()})
    yield server
    server.stop()


def hold(server: MeterServer, memory: int) -> None:
    kernel_id = server.start_session("train.ipynb")
    pid = int(evaluate(server.client(kernel_id), "os.getpid()", "import os"))
    assert server.state is not None
    server.state.write(FakeState(devices=[FakeDevice.a100(0)], processes=[FakeProcess(0, pid, memory)]))
    wait_until(lambda: server.usage()["server"]["gpu_memory_bytes"] == memory, what=f"{memory} bytes read", timeout=30)


def test_too_few_sessions_yet_are_said_so(server: MeterServer) -> None:
    advice = server.usage()["advice"]  # MeterServer.usage() checks it against usage.schema.json
    assert advice["state"] == "waiting"
    assert advice["text"].startswith("No advice yet: 3 sessions needed (")


def test_this_sessions_report_completes_the_advice_for_next_time(server: MeterServer, service: ReportServer):
    service.earlier_sessions = [past_session(peak_bytes=4 * GIB), past_session(peak_bytes=3 * GIB)]
    hold(server, 5 * GIB)
    expected = "Your last 3 sessions on 0.25 GPU peaked at 5 GiB or less. 1/8 GPU (10 GiB) would have fit."
    wait_until(lambda: server.usage()["advice"].get("text") == expected, what="the advice with 5 GiB", timeout=30)
    assert server.usage()["advice"] == {
        "state": "advice", "text": expected, "larger": False, "sessions": 3, "p95_bytes": 5 * GIB
    }  # fmt: skip


def test_no_service_or_a_refusing_one_means_no_advice(
    fake_nvml_library: Path, tmp_path: Path, service: ReportServer
) -> None:
    refused = {**QUARTER, **service.environment(), "JUPYTERHUB_API_TOKEN": "another-token"}
    for name, env in (("refused", refused), ("none", QUARTER)):
        (tmp_path / name).mkdir()
        server = run_server(tmp_path / name, fake_nvml_library, env)
        try:
            usage = server.usage()
            assert (usage["available"], usage["advice"]) == (True, None)
        finally:
            server.stop()


def test_the_request_names_this_servers_choice_and_needs_a_service_a_token_and_a_profile():
    url, headers = advice_request("http://hub:10101/services/fracnb/", "t0k", "a100", "size=half,memory=x")
    assert url == "http://hub:10101/services/fracnb/api/advice?profile=a100&choice=size%3Dhalf%2Cmemory%3Dx"
    assert headers["Authorization"] == "token t0k"
    assert advice_request("", "t0k", "a100", None) is None
    assert advice_request("http://hub/", "", "a100", None) is None
    assert advice_request("http://hub/", "t0k", None, None) is None  # a server without the FRACNB_* contract


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"state": "advice", "text": "x"}', b'{"state": "none", "extra": 1}', b'{"state": "maybe"}'],
    ids=["text", "partial", "extra-field", "unknown-state"],
)
def test_answers_of_another_shape_are_ignored(body):
    advice, problem = parse_advice(body)
    assert advice is None
    assert problem


def test_each_state_of_the_schema_is_taken():
    assert parse_advice(b'{"state": "none"}') == ({"state": "none"}, None)
    assert parse_advice(b'{"state": "waiting", "text": "No advice yet."}')[0]["text"] == "No advice yet."
