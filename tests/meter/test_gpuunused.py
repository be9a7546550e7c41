"""GPU-unused time in windows (fracnb_meter.gpuunused): the pure counting, on explicit times."""

from __future__ import annotations

import pytest

from fracnb_meter.gpuunused import (
    FIRST_WINDOW,
    MPS,
    NOT_LOCAL,
    GpuUnused,
    ServerWork,
    UnusedCount,
    Work,
    sharing_blocks,
    work_of,
)
from fracnb_meter.nvml import NO_SAMPLES, GpuReading, unavailable
from fracnb_schemas import GPU_UNUSED, check

IDLE, BUSY = Work(False), Work(True)
SERVER, KERNEL_A, KERNEL_B = 10, 20, 30
PARENTS = {KERNEL_A: SERVER, KERNEL_B: SERVER, 21: KERNEL_A, 40: SERVER, SERVER: 1}


def feed(count: UnusedCount, until: float, work: Work, every: float = 5.0, start: float = 0.0) -> None:
    at = start + every
    while at <= until + 1e-9:
        count.observe(at, work)
        at += every


def test_unused_windows_add_up() -> None:
    count = UnusedCount(0.0)
    assert count.as_json() == {"seconds": None, "reason": FIRST_WINDOW}
    feed(count, 25, IDLE)
    assert count.seconds is None  # the first window is not over
    feed(count, 95, IDLE, start=25)
    assert count.as_json() == {"seconds": 90, "reason": None}


def test_gpu_work_resets_at_once_and_its_window_counts_as_used() -> None:
    count = UnusedCount(0.0)
    feed(count, 120, IDLE)
    assert count.seconds == 120
    count.observe(125, BUSY)  # some work in the window 120-150
    assert count.seconds == 0
    feed(count, 175, IDLE, start=125)
    assert count.seconds == 0  # 150-180 is not over
    feed(count, 180, IDLE, start=175)
    assert count.seconds == 30


def test_an_unknown_stretch_is_never_unused_and_ends_the_count() -> None:
    count = UnusedCount(0.0)
    feed(count, 300, IDLE)
    assert count.seconds == 300
    count.observe(305, Work(None, "NVML failed (Unknown Error): GPU usage cannot be read right now."))
    feed(count, 325, IDLE, start=305)
    assert count.seconds == 300  # the open window is not judged yet
    feed(count, 330, IDLE, start=325)
    assert count.as_json() == {
        "seconds": None,
        "reason": "NVML failed (Unknown Error): GPU usage cannot be read right now.",
    }
    feed(count, 360, IDLE, start=330)
    assert count.seconds == 30  # counted again from the first whole unused window


def test_a_gap_longer_than_the_driver_keeps_samples_is_unknown() -> None:
    count = UnusedCount(0.0)
    feed(count, 60, IDLE)
    count.observe(69, IDLE)  # 9 s since the last reading: samples may have been lost
    feed(count, 90, IDLE, start=69, every=3)
    assert count.seconds is None
    assert "9 s" in (count.reason or "")
    count.observe(100, BUSY)  # work seen after a gap is work
    assert count.seconds == 0


def test_readings_cached_by_the_sampler_count_once_and_kernels_come_and_go() -> None:
    counts = GpuUnused(window=30)
    both = ServerWork(IDLE, {"a": IDLE, "b": BUSY})
    assert counts.observe(1, 0.0, both)
    assert counts.kernel_json("a") == {"seconds": None, "reason": FIRST_WINDOW}
    assert counts.kernel_json("b") == {"seconds": 0, "reason": None}  # seen working at its first reading
    for read, at in enumerate(range(5, 65, 5), start=2):
        assert counts.observe(read, float(at), both)
    assert counts.kernel_json("a") == {"seconds": 60, "reason": None}
    assert not counts.observe(13, 61.0, ServerWork(BUSY, {"a": BUSY}))  # the same read again: ignored
    assert counts.kernel_json("a") == {"seconds": 60, "reason": None}
    assert counts.observe(14, 62.0, ServerWork(BUSY, {"a": BUSY, "b": BUSY}))
    assert counts.kernel_json("a") == {"seconds": 0, "reason": None}
    counts.observe(15, 65.0, ServerWork(IDLE, {"c": IDLE}))
    assert set(counts.kernels) == {"c"}
    assert counts.report() is None  # nothing noted yet
    counts.note(measured_at="2026-03-01T12:00:00Z", gpu_memory_bytes=1 << 30, busy_kernels=1)
    report = counts.report()
    assert report == {"seconds": 0, "reason": None, "measured_at": "2026-03-01T12:00:00Z", "window_seconds": 30,
                      "gpu_memory_bytes": 1 << 30, "busy_kernels": 1}  # fmt: skip
    check(GPU_UNUSED, counts.kernel_json("c"))


def reading(busy: frozenset[int] | None, driver: str = "570.86.15") -> GpuReading:
    return GpuReading(available=True, driver_version=driver, busy_pids=busy)


def kernels_of(**pids: int | None) -> dict[str, int | None]:
    return pids


def test_work_is_attributed_to_kernels_through_their_children() -> None:
    work = work_of(reading(frozenset({21})), kernels_of(a=KERNEL_A, b=KERNEL_B), SERVER, PARENTS.get,
                   in_container=True)  # fmt: skip
    assert work.server == BUSY
    assert work.kernels == {"a": BUSY, "b": IDLE}
    # A terminal's process (a child of the server, not of a kernel) keeps the server's GPU in use only.
    work = work_of(reading(frozenset({40})), kernels_of(a=KERNEL_A), SERVER, PARENTS.get, in_container=True)
    assert (work.server, work.kernels["a"]) == (BUSY, IDLE)
    # Other tenants' processes (not ours) are no work of ours.
    work = work_of(reading(frozenset({999})), kernels_of(a=KERNEL_A), SERVER, PARENTS.get, in_container=True)
    assert (work.server, work.kernels["a"]) == (IDLE, IDLE)


@pytest.mark.parametrize(
    ("gpu_reading", "blocked", "reason"),
    [
        (unavailable("NVML failed (Unknown Error): GPU usage cannot be read right now."), None, "NVML failed"),
        (reading(None), None, NO_SAMPLES),  # MIG instances, or no such call in the driver
        (reading(frozenset(), driver="565.57.01"), None, "570.86.15"),  # host pids in samples
        (reading(frozenset()), MPS, "MPS"),
    ],
)
def test_no_data_is_unknown_for_the_server_and_every_kernel(gpu_reading: GpuReading, blocked: str | None,
                                                            reason: str) -> None:  # fmt: skip
    work = work_of(gpu_reading, kernels_of(a=KERNEL_A), SERVER, PARENTS.get, in_container=True, blocked=blocked)
    assert work.server.worked is None
    assert work.kernels["a"].worked is None
    assert reason in (work.server.reason or "")


def test_an_old_driver_outside_a_container_has_our_own_pids() -> None:
    work = work_of(reading(frozenset({KERNEL_A}), driver="565.57.01"), kernels_of(a=KERNEL_A), SERVER, PARENTS.get,
                   in_container=False)  # fmt: skip
    assert work.kernels["a"] == BUSY


def test_a_kernel_that_is_not_a_local_process_is_unknown() -> None:
    work = work_of(reading(frozenset()), kernels_of(a=KERNEL_A, remote=None), SERVER, PARENTS.get, in_container=True)
    assert work.kernels == {"a": IDLE, "remote": Work(None, NOT_LOCAL)}


@pytest.mark.parametrize(
    ("backend", "isolation", "env", "blocked"),
    [
        ("mps", "per-process", {}, True),
        ("dra", "enforced", {}, True),  # a dra slice with an MPS pinned-memory limit
        ("dra", "none", {}, False),
        ("time-slicing", "none", {}, False),
        ("hami", "enforced", {}, False),
        (None, None, {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps"}, True),
    ],
)
def test_mps_hides_whose_work_it_is(backend: str | None, isolation: str | None, env: dict[str, str],
                                    blocked: bool) -> None:  # fmt: skip
    assert (sharing_blocks(backend, isolation, env) == MPS) is blocked
