"""The one polling helper, in both forms: ``wait_until`` (blocking) and ``wait_until_async`` (in an event loop)."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
from types import SimpleNamespace

import pytest

from fracnb_testbed import procs
from fracnb_testbed.errors import TestbedError
from fracnb_testbed.procs import ProcessRecord, start_ticks_of, wait_until, wait_until_async


def test_it_returns_what_the_check_found_once_it_is_true() -> None:
    tries = itertools.count(1)
    assert wait_until(lambda: max(next(tries) - 2, 0), what="the third try", timeout=5, interval=0) == 1


async def test_the_async_form_awaits_a_coroutine_check_and_lets_the_loop_run() -> None:
    arrived = asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, arrived.set)

    async def check() -> str | None:
        return "arrived" if arrived.is_set() else None

    assert await wait_until_async(check, what="the event", timeout=5, interval=0.01) == "arrived"


async def test_the_async_form_takes_a_plain_check_too() -> None:
    tries = itertools.count()
    assert await wait_until_async(lambda: next(tries) >= 2, what="the third try", timeout=5, interval=0) is True


TIMED_OUT = r"^timed out after 0s waiting for the sky to fall$"


def test_a_timeout_names_what_was_awaited_and_how_long() -> None:
    with pytest.raises(TestbedError, match=TIMED_OUT):
        wait_until(lambda: False, what="the sky to fall", timeout=0.1, interval=0.01)


async def test_the_async_form_times_out_alike() -> None:
    with pytest.raises(TestbedError, match=TIMED_OUT):
        await wait_until_async(lambda: False, what="the sky to fall", timeout=0.1, interval=0.01)


def test_a_watched_process_that_exits_ends_the_wait_at_once_with_its_log(tmp_path) -> None:
    log = tmp_path / "short.log"
    log.write_text("starting\nout of memory\n")
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    record = ProcessRecord("short", process.pid, start_ticks_of(process.pid) or 0, str(log))
    process.wait()
    with pytest.raises(TestbedError, match="short exited while waiting for a port") as caught:
        wait_until(lambda: False, what="a port", timeout=60, watched=record)
    assert "out of memory" in str(caught.value)


def test_progress_is_reported_while_the_wait_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = itertools.count(0, 3)  # each reading of the clock 3 s later than the last
    monkeypatch.setattr(procs, "time", SimpleNamespace(monotonic=lambda: float(next(clock)), sleep=lambda _s: None))
    said: list[str] = []
    with pytest.raises(TestbedError):
        wait_until(lambda: False, what="a node", timeout=20, progress=said.append)
    assert said == ["still waiting for a node (6s)", "still waiting for a node (12s)", "still waiting for a node (18s)"]
