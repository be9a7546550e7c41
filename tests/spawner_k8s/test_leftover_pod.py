"""A start that finds a leftover pod of the same name: KubeSpawner stops it (``stop(True)``) and creates
the pod again. Removing the leftover must not release the quota reservation of the start in progress:
while the leftover goes, a concurrent spawn of the same user must still see the share as taken."""

from __future__ import annotations

import asyncio

from traitlets.config import Config

from fracnb_spawner.hubstate import HubState
from fracnb_testbed.procs import wait_until_async

from .test_queue import member


def leftover(name: str) -> dict:
    """A singleuser pod an earlier start left behind; a finalizer keeps it while it is deleted."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"component": "singleuser-server"},
            "finalizers": ["fracnb.test/hold"],
        },
        "spec": {
            "nodeSelector": {"type": "kwok"},
            "containers": [{"name": "notebook", "image": "example.invalid/old"}],
        },
    }


async def test_removing_a_leftover_pod_keeps_the_reservation(cluster_spawner, testbed, k8s_namespace) -> None:
    config = Config()
    config.FracnbQuotas.group_quotas = {"team": "1/4"}
    spawner = cluster_spawner({"profile": "quarter"}, user="olga", config=config)
    member(spawner, "team", "olga", "pia")
    testbed.create_pod(k8s_namespace, leftover(spawner.pod_name))
    start = asyncio.ensure_future(spawner.start())
    ledger = HubState.current().ledger

    def leftover_going() -> bool:
        found = next((p for p in testbed.list_pods(k8s_namespace) if p["metadata"]["name"] == spawner.pod_name), None)
        return found is not None and bool(found["metadata"].get("deletionTimestamp"))

    await wait_until_async(leftover_going, what="the leftover pod being deleted", timeout=60)
    assert ledger.reserved("olga", "") is not None
    # Her teammate's spawn would pass the team's quota if olga's share had been released.
    other = cluster_spawner({"profile": "quarter"}, user="pia", config=config)
    member(other, "team", "olga", "pia")
    refused = await asyncio.gather(other.check_options({"profile": "quarter"}), return_exceptions=True)
    assert "quota" in str(refused[0]).lower()
    testbed.patch_pod(k8s_namespace, spawner.pod_name, {"metadata": {"finalizers": None}})
    await asyncio.wait_for(start, 60)
    assert ledger.reserved("olga", "") is not None
    await spawner.stop()
    assert ledger.reserved("olga", "") is None
