"""Reclaim through the fracnb service as it runs under JupyterHub (``c.FracnbReclaim.enabled``), on the ``dra``
cluster: a training pod below the notebooks' priority holds the A100; alice's 0.25 GPU waits in the hub's queue;
the service's own loop evicts the training pod, its event says why, alice's server starts, and the service's
/metrics counts the reclaim. The pass itself, its limits and budgets, are tested in test_reclaim.py."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from fracnb_testbed.procs import wait_until_async
from tests.service.conftest import running_hub
from tests.spawner_k8s.test_dra_queue import A100, a100_config, gated, pod_of, queued
from tests.spawner_k8s.test_reclaim import claim_template, holding

pytestmark = pytest.mark.k8s

RECLAIM_CONFIG = f"""
c.FractionalSpawner.profile_list = [
    {{"display_name": "A100 quarter", "slug": "quarter", "gpu": {{"fraction": 0.25, "backend": "dra", "product": {A100!r}}}}},
]
c.FracnbReclaim.enabled = True
c.FracnbReclaim.every = 1
"""


async def test_the_services_own_loop_evicts_batch_for_a_queued_notebook_and_counts_it(
    dra_spawner, dra_testbed, dra_namespace, batch_namespace, tmp_path: Path
) -> None:
    claim_template(dra_testbed, batch_namespace, "whole-a100", None)
    await holding(dra_testbed, batch_namespace, "train", "whole-a100")
    alice = dra_spawner({"profile": "quarter"}, user="alice", config=a100_config())
    started = await queued(alice)
    env = {"KUBECONFIG": str(dra_testbed.kubeconfig), "POD_NAMESPACE": dra_namespace}
    with contextlib.ExitStack() as stack:
        # The hub starts in a thread: alice's spawn waits in this event loop meanwhile.
        hub = await asyncio.to_thread(stack.enter_context, running_hub(tmp_path, env, RECLAIM_CONFIG))
        await wait_until_async(
            lambda: pod_of(dra_testbed, batch_namespace, "train") is None,
            what="the fracnb service to evict the training pod", timeout=90,
        )  # fmt: skip

        # The service writes the event after the eviction's answer: KWOK may have deleted the pod before.
        def reasons() -> list[str]:
            events = dra_testbed.events_for(batch_namespace, "train")
            return [e["message"] for e in events if e["reason"] == "Reclaimed"]

        await wait_until_async(lambda: reasons() != [], what="the reclaim's event on the training pod", timeout=30)
        assert reasons() == ["reclaimed for a 0.25 GPU notebook of alice"]
        assert (await asyncio.wait_for(started, 60)).startswith("http://")
        assert not gated(dra_testbed, dra_namespace, alice.pod_name)
        status, metrics = await asyncio.to_thread(hub.http, "GET", hub.service_url + "metrics", None, hub.admin_token)
        assert status == 200, metrics
        assert 'fracnb_reclaims_total{outcome="evicted"} 1.0' in metrics
        await alice.stop()
        await asyncio.to_thread(stack.close)
