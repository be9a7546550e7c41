"""What the notebook side takes from the hub: the service's quota/cull answer, and kernel culling."""

from __future__ import annotations

import time
from datetime import timezone
from pathlib import Path

import pytest

from fracnb_meter.hubservice import NO_REPORT, ServiceReports, fetch_report_blocking, report_from_me
from fracnb_meter.testing.fakenvml import FakeDevice, FakeProcess, FakeState
from fracnb_meter.testing.server import StateFile, start_server
from fracnb_meter.wording import cull_warning
from fracnb_schemas import SERVICE_REPORT, USAGE, SchemaMismatchError, problems
from fracnb_spawner.queue.kueue.quota import TeamQuota, borrowing_note
from fracnb_testbed.procs import wait_until
from tests.service_reports import IDLE_WARNING, IDLE_WARNING_SAVING, SCENARIOS, ReportServer, report


async def test_report_from_me_maps_the_service_report_to_the_usage_shapes() -> None:
    me = await report(IDLE_WARNING)
    quota, cull = report_from_me(me, "")
    assert quota == {
        "user": {"used": {"gpus": 0.25, "exact": "1/4"}, "limit": {"state": "limited", "gpus": 1.0, "exact": "1"}},
        "groups": [
            {
                "name": "team-a",
                "used": {"gpus": 5.75, "exact": "23/4"},
                "limit": {"state": "limited", "gpus": 6.0, "exact": "6"},
            }
        ],
    }
    assert cull == me["culling"][""]
    assert report_from_me(me, "other-server")[1] is None


async def test_the_warning_says_the_variables_will_be_saved_only_where_the_stop_saves_them() -> None:
    saving = report_from_me(await report(IDLE_WARNING_SAVING), "")[1]
    plain = report_from_me(await report(IDLE_WARNING), "")[1]
    assert saving is not None
    assert plain is not None
    assert saving["deadline"]["saves_variables"] is True
    assert "saves_variables" not in plain["deadline"]
    assert cull_warning(saving["deadline"], timezone.utc) == (
        "Idle: this server will be stopped in 4 minutes unless you use it. Its variables will be saved for your next start."
    )
    assert "saved" not in (cull_warning(plain["deadline"], timezone.utc) or "")


async def test_the_services_borrowing_words_reach_the_usage_documents_quota() -> None:
    """With Kueue, while the user's team runs on lent quota (the service's ``borrowing``): the panel says it."""
    words = borrowing_note(TeamQuota("team-a", 250, 500, 0, 0, "university"))
    assert words is not None
    me = {**await report(IDLE_WARNING), "borrowing": words}
    assert problems(SERVICE_REPORT, me, check_formats=True) == []
    quota, _ = report_from_me(me, "")
    assert quota is not None
    assert quota["borrowing"] == words
    assert problems(USAGE, quota, "/properties/quota") == []
    assert "borrowing" not in (report_from_me(await report(IDLE_WARNING), "")[0] or {})


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_every_service_report_becomes_usage_fields_of_the_schema(name: str) -> None:
    me = await report(SCENARIOS[name])
    assert problems(SERVICE_REPORT, me, check_formats=True) == []
    quota, cull = report_from_me(me, "")
    assert problems(USAGE, quota, "/properties/quota") == []
    assert problems(USAGE, cull, "/properties/cull", check_formats=True) == []


def test_groups_without_quota_are_left_out() -> None:
    me = {
        "user": "ann",
        "servers": [],
        "used": {"gpus": 0.0, "exact": "0"},
        "quota": {"state": "none"},
        "groups": [{"name": "misc", "used": {"gpus": 0.5, "exact": "1/2"}, "quota": {"state": "none"}}],
        "available": {"state": "unlimited"},
        "culling": {},
        "warning_lead_seconds": 900,
    }
    assert report_from_me(me, "") == ({"user": {"used": me["used"], "limit": {"state": "none"}}, "groups": []}, None)


@pytest.mark.parametrize(
    "answer",
    [
        # The shape before the limit states: an unlimited quota was {"gpus": null}.
        {"user": "ann", "servers": [], "used": {"gpus": 0.25, "exact": "1/4"}, "quota": {"gpus": None, "exact": None},
         "groups": [], "available": {"gpus": None, "exact": None}, "culling": {}, "warning_lead_seconds": 900},
        [],
        "teapot",
    ],
    ids=["older-service", "list", "string"],
)  # fmt: skip
def test_an_answer_that_is_not_a_report_is_refused(answer: object) -> None:
    with pytest.raises(SchemaMismatchError, match=r"not a service-me\.schema\.json document"):
        report_from_me(answer, "")


async def test_unreachable_or_unconfigured_service_means_no_report() -> None:
    assert not ServiceReports("", "token", "", 1.0).enabled
    assert await ServiceReports("", "token", "", 1.0).latest() == NO_REPORT
    assert await ServiceReports("ftp://hub/services/fracnb/", "t", "", 1.0).latest() == NO_REPORT
    started = time.monotonic()
    assert await ServiceReports("http://127.0.0.1:1/services/fracnb/", "t", "", 1.0).latest() == NO_REPORT
    assert fetch_report_blocking("http://127.0.0.1:1/services/fracnb/", "t", "") == NO_REPORT
    assert time.monotonic() - started < 10


async def test_reports_over_http_and_answers_from_another_version() -> None:
    service = ReportServer.start()
    try:
        reports = ServiceReports(service.url, service.token, "", 0.0)
        assert await reports.latest() == NO_REPORT  # 503: no scenario yet
        service.scenario = IDLE_WARNING
        quota, cull = await reports.latest()
        assert quota is not None
        assert cull is not None
        assert cull["deadline"]["warning"] is True
        assert fetch_report_blocking(service.url, service.token, "") == (quota, cull)
        service.raw = b'{"user": "ann", "quota": {"gpus": null}}'
        assert await reports.latest() == NO_REPORT
        assert fetch_report_blocking(service.url, service.token, "") == NO_REPORT
        assert await ServiceReports(service.url, "wrong-token", "", 0.0).latest() == NO_REPORT
    finally:
        service.stop()


def test_idle_kernels_are_culled_and_busy_ones_kept(tmp_path: Path) -> None:
    server = start_server(tmp_path, None, None, extra_env={"FRACNB_KERNEL_CULL_IDLE_TIMEOUT": "2"})
    try:
        idle = server.start_session("idle.ipynb")
        busy = server.start_session("busy.ipynb")
        client = server.client(busy)
        client.execute("import time; time.sleep(40)")

        def kernel_ids() -> set[str]:
            status, kernels = server.request("api/kernels")
            assert status == 200
            return {k["id"] for k in kernels}

        wait_until(lambda: idle not in kernel_ids(), what="the idle kernel to be culled", timeout=40, interval=1)
        assert busy in kernel_ids(), "a busy kernel must not be culled"
    finally:
        server.stop()


def test_culling_an_idle_kernel_gives_its_gpu_memory_back(tmp_path: Path, fake_nvml_library: Path) -> None:
    state = StateFile(tmp_path / "nvml-state")
    state.write(FakeState(devices=[FakeDevice.a100(0)], release_exited=True))
    env = {
        "FRACNB_KERNEL_CULL_IDLE_TIMEOUT": "2",
        "FRACNB_GPU_MEMORY_LIMIT": str(20 << 30),
        "FRACNB_GPU_FRACTION": "0.25",
    }
    server = start_server(
        tmp_path, fake_nvml_library, state, meter_config={"sample_interval_floor": 0.0}, extra_env=env
    )
    try:
        kernel_id = server.start_session("holds-gpu.ipynb")
        (kernel,) = [k for k in server.usage()["kernels"] if k["id"] == kernel_id]
        state.write(
            FakeState(
                devices=[FakeDevice.a100(0)], processes=[FakeProcess(0, kernel["pid"], 4 << 30)], release_exited=True
            )
        )
        assert server.usage()["server"]["gpu_memory_bytes"] == 4 << 30
        wait_until(lambda: not server.usage()["kernels"], what="the idle kernel to be culled", timeout=40, interval=1)
        usage = server.usage()
        assert usage["kernels"] == []
        assert usage["server"]["gpu_memory_bytes"] == 0
        assert usage["gpus"][0]["memory_used_bytes"] == 0
    finally:
        server.stop()
