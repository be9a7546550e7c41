"""The IOPub watch (kernelwatch) on jupyter_server's own kernel manager and real kernels, in this process.

It follows kernels as they start, restart and shut down, reads errors in order, and raises or
warns nothing (pytest treats warnings as errors). The same watch inside a running server, fed by
its periodic check of the kernel list, is tested in test_session_reporting.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager

from fracnb_meter.kernelwatch import KernelWatch
from fracnb_testbed.procs import wait_until_async

OOM_CELL = (
    "class OutOfMemoryError(RuntimeError): pass\nraise OutOfMemoryError('CUDA out of memory. Tried to allocate 2 GiB')"
)


@pytest.fixture
async def manager(tmp_path: Path) -> AsyncIterator[AsyncMappingKernelManager]:
    manager = AsyncMappingKernelManager(root_dir=str(tmp_path), connection_dir=str(tmp_path))
    yield manager
    await manager.shutdown_all(now=True)


async def run_cell(manager: AsyncMappingKernelManager, kernel_id: str, code: str) -> str:
    client: AsyncKernelClient = manager.get_kernel(kernel_id).client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        reply = await client.execute_interactive(code, timeout=60, output_hook=lambda _msg: None)
    finally:
        client.stop_channels()
    return reply["content"]["status"]


async def test_each_kernel_is_watched_while_it_runs(manager: AsyncMappingKernelManager) -> None:
    seen: list[tuple[str, str, str | None]] = []
    watch = KernelWatch(manager, lambda *error: seen.append(error))
    first = await manager.start_kernel(kernel_name="python3")
    second = await manager.start_kernel(kernel_name="python3")
    watch.sync()
    assert watch.watched == sorted([first, second])

    assert await run_cell(manager, first, "raise ValueError('bad shape')") == "error"
    assert await run_cell(manager, first, OOM_CELL) == "error"
    await wait_until_async(lambda: len(seen) >= 1, what="the error to be seen", timeout=30, interval=0.05)
    assert [(kernel_id, name) for kernel_id, name, _request in seen] == [(first, "python3")]
    assert seen[0][2]  # the execution request it answered

    await manager.restart_kernel(first)
    watch.sync()  # same ports: the subscription stays and reconnects by itself
    assert await run_cell(manager, first, OOM_CELL) == "error"
    await wait_until_async(lambda: len(seen) >= 2, what="the error after the restart", timeout=30, interval=0.05)

    await manager.shutdown_kernel(second)
    watch.sync()
    assert watch.watched == [first]
    watch.stop()
    assert watch.watched == []
    watch.sync()  # after the stop, kernels still running are left alone
    assert watch.watched == []
