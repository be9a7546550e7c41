"""What the notebook side takes from the hub: the service's quota/cull answer, and kernel culling."""

from __future__ import annotations

import time
from pathlib import Path

from fracnb_meter.hubservice import NO_REPORT, ServiceReports, fetch_report_blocking, report_from_me
from fracnb_meter.testing.fakenvml import FakeDevice, FakeProcess, FakeState
from fracnb_meter.testing.server import StateFile, start_server

ME = {
    "user": "ann",
    "servers": [{"server": "", "profile": "quarter", "fraction": {"gpus": 0.25, "exact": "1/4"}}],
    "used": {"gpus": 0.25, "exact": "1/4"},
    "quota": {"gpus": 1.0, "exact": "1"},
    "groups": [
        {"name": "team-a", "used": {"gpus": 5.75, "exact": "23/4"}, "quota": {"gpus": 6.0, "exact": "6"}},
        {"name": "no-quota", "used": {"gpus": 0.25, "exact": "1/4"}, "quota": None},
    ],
    "available": {"gpus": 0.25, "exact": "1/4"},
    "culling": {
        "": {"idle_timeout_seconds": 1800, "max_age_seconds": 0, "cull_at": "2026-03-01T12:30:00Z",
             "seconds_left": 300.0, "reason": "idle", "warning": True},
    },
    "warning_lead_seconds": 900,
}  # fmt: skip


def test_report_from_me_maps_to_the_usage_shapes() -> None:
    quota, cull = report_from_me(ME, "")
    assert quota == {
        "user": {"used": 0.25, "limit": 1.0},
        "groups": [{"name": "team-a", "used": 5.75, "limit": 6.0}],
    }
    assert cull == {
        "idle_timeout_seconds": 1800,
        "cull_at": "2026-03-01T12:30:00Z",
        "seconds_left": 300.0,
        "warning": True,
        "reason": "idle",
    }
    assert report_from_me(ME, "other-server")[1] is None


def test_unlimited_user_quota_is_null() -> None:
    quota, _ = report_from_me({**ME, "quota": None}, "")
    assert quota is not None
    assert quota["user"]["limit"] is None


async def test_unreachable_or_unconfigured_service_means_no_report() -> None:
    assert not ServiceReports("", "token", "", 1.0).enabled
    assert await ServiceReports("", "token", "", 1.0).latest() == NO_REPORT
    assert await ServiceReports("ftp://hub/services/fracnb/", "t", "", 1.0).latest() == NO_REPORT
    started = time.monotonic()
    assert await ServiceReports("http://127.0.0.1:1/services/fracnb/", "t", "", 1.0).latest() == NO_REPORT
    assert fetch_report_blocking("http://127.0.0.1:1/services/fracnb/", "t", "") == NO_REPORT
    assert time.monotonic() - started < 10


def test_idle_kernels_are_culled_and_busy_ones_kept(tmp_path: Path) -> None:
    server = start_server(tmp_path, None, None, extra_env={"FRACNB_KERNEL_CULL_IDLE_TIMEOUT": "2"})
    try:
        idle = server.start_session("idle.ipynb")
        busy = server.start_session("busy.ipynb")
        client = server.client(busy)
        client.execute("import time; time.sleep(40)")
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            status, kernels = server.request("api/kernels")
            assert status == 200
            ids = {k["id"] for k in kernels}
            if idle not in ids:
                break
            time.sleep(1)
        assert idle not in ids, "the idle kernel was not culled"
        assert busy in ids, "a busy kernel must not be culled"
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
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and server.usage()["kernels"]:
            time.sleep(1)
        usage = server.usage()
        assert usage["kernels"] == [], "the idle kernel was not culled"
        assert usage["server"]["gpu_memory_bytes"] == 0
        assert usage["gpus"][0]["memory_used_bytes"] == 0
    finally:
        server.stop()
