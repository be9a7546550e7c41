"""A server's stop looks out for Kueue's finalizer only on pods Kueue manages (literal pods, no cluster)."""

from __future__ import annotations

import asyncio

import pytest

from fracnb_spawner.queue.kueue import model as kueue
from fracnb_spawner.queue.kueue import stop as kueuestop
from tests.spawner.queue.fakes import running


@pytest.fixture
def looks_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop that watches its pod looks again at every turn of the loop, not every second."""
    monkeypatch.setattr(kueuestop, "POLL_SECONDS", 0)


async def stop_watching(pod: dict | None) -> int:
    """How often a stop that takes a few turns of the event loop looked at ``pod`` (the API is never called:
    the pod is not deleted, so no finalizer of it is due to come off)."""
    looks = 0

    def look() -> dict | None:
        nonlocal looks
        looks += 1
        return pod

    async def stopping() -> None:
        for _ in range(5):
            await asyncio.sleep(0)

    await kueuestop.stop_past_kueue(stopping(), look, api=None, log=None, timeout=10)
    return looks


@pytest.mark.usefixtures("looks_at_once")
async def test_a_pod_kueue_does_not_manage_is_looked_at_once() -> None:
    assert await stop_watching(running("ann")) == 1  # the builtin engine's pods: no finalizer of Kueue's


@pytest.mark.usefixtures("looks_at_once")
async def test_a_pod_with_kueues_finalizer_or_none_yet_in_the_watch_is_watched_until_it_is_gone() -> None:
    managed = running("ann")
    managed["metadata"]["finalizers"] = [kueue.MANAGED_FINALIZER]
    assert await stop_watching(managed) > 1
    assert await stop_watching(None) > 1
