"""The local runner follows pods as a kubelet does: one LIST, then watches resumed from the last version."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from kubernetes_asyncio import client

from fracnb_testbed import runner as runner_module
from fracnb_testbed.procs import wait_until_async
from tests.testbed.test_cluster import gpu_pod

pytestmark = pytest.mark.k8s


class RecordingRunner(runner_module.Runner):
    """The runner's watching, with what it would reconcile recorded instead (the testbed's own runner runs pods)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lists = 0
        self.watches = 0
        self.seen: list[tuple[str, str]] = []

    async def _relist(self) -> str:
        self.lists += 1
        return await super()._relist()

    async def _watch(self, version: str) -> str | None:
        self.watches += 1
        return await super()._watch(version)

    async def reconcile(self, kind: str, pod: dict) -> None:
        self.seen.append((kind, pod["metadata"]["name"]))


async def test_a_watch_the_server_ends_resumes_without_listing_again(testbed, k8s_namespace, monkeypatch) -> None:
    monkeypatch.setattr(runner_module, "WATCH_SECONDS", 1)  # the server ends each watch after a second
    async with testbed.api_client() as api_client:
        watching = RecordingRunner(testbed.state, client.CoreV1Api(api_client))
        task = asyncio.ensure_future(watching.run_forever())
        try:
            await wait_until_async(lambda: watching.watches >= 3, what="three watches", timeout=30, interval=0.05)
            testbed.create_pod(k8s_namespace, gpu_pod("resumed", 1, {"nvidia.com/gpu.replicas": "4"}))
            await wait_until_async(
                lambda: ("ADDED", "resumed") in watching.seen and watching.watches >= 5,
                what="the pod's creation seen and two more watches",
                timeout=30,
                interval=0.05,
            )
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert watching.lists == 1  # one LIST; each later watch resumed from the version the last one reached
