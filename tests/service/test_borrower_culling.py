"""Borrowers of a training card and the fracnb service's culling, against a real JupyterHub and the testbed's
apiserver: an idle borrower gets its timeout under demand only while a batch pod waits for its pool (in another
namespace, below notebook priority, able to run there); a busy borrower is never stopped for it."""

from __future__ import annotations

import contextlib
import secrets
from datetime import timedelta

from bench.reclaim import BATCH, batch_priority
from fracnb_spawner.culling import CullPolicy
from fracnb_spawner.quota.policy import QuotaPolicy
from fracnb_spawner.service.cullpass import CullSettings, cull_pass, user_report
from fracnb_spawner.service.hubapi import HubAPI
from fracnb_spawner.service.metrics import CullMetrics
from tests.service.calls import record_activity
from tests.service.test_demand_culling import last_activity

TRAINING_SLOT = "nvidia.com-gpu.training"
TRAINING = {"fracnb.io/pool": "training"}


def borrowing(testbed, namespace: str, user: str) -> None:
    """The pod of a server that borrowed a training card (as the hub's builtin queue makes it)."""
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": f"jupyter-{user}",
            "annotations": {"hub.jupyter.org/username": user, "hub.jupyter.org/servername": "",
                            "fracnb.io/gpu-fraction": "1/4", "fracnb.io/profile": "quarter",
                            "fracnb.io/idle-timeout": "3600", "fracnb.io/idle-timeout-under-demand": "1200",
                            "fracnb.io/borrowed-from": "nvidia.com-gpu.shared"},
            "labels": {"component": "singleuser-server", "fracnb.io/profile": "quarter",
                       "fracnb.io/slot-kind": TRAINING_SLOT, "fracnb.io/borrowed": "true"},
        },
        "spec": {"nodeName": "fracnb-nowhere", "nodeSelector": TRAINING,
                 "containers": [{"name": "notebook", "image": "example.invalid/notebook"}]},
    }  # fmt: skip
    testbed.create_pod(namespace, pod)


@contextlib.contextmanager
def training_waits(testbed, selector: dict[str, str]):
    """A batch pod (priority -100) asking for a whole GPU on nodes of ``selector``; no node has it: it waits."""
    batch_priority(testbed)
    namespace = testbed.create_namespace()
    testbed.create_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train"},
        "spec": {"priorityClassName": BATCH, "nodeSelector": selector,
                 "containers": [{"name": "train", "image": "train", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    })  # fmt: skip
    try:
        yield
    finally:
        testbed.delete_namespace(namespace)


async def test_an_idle_borrower_is_culled_while_training_waits_and_a_busy_one_never(
    hub, new_user, testbed, hub_namespace, pod_source
) -> None:
    idle, busy = new_user("idle"), new_user("busy")
    for user in (idle, busy):
        hub.start_server(user)
        borrowing(testbed, hub_namespace, user)
    now = last_activity(hub, idle) + timedelta(minutes=25)  # past its 20 minutes under demand, within its hour
    record_activity(hub, busy, now - timedelta(seconds=30))
    api = HubAPI(hub.api_url, hub.service_token)
    settings = CullSettings(default_policy=CullPolicy(idle_timeout=3600), warning_lead=600, page_size=1)

    async def culled_at(moment):
        report = await cull_pass(api, pod_source, settings, CullMetrics(), clock=lambda: moment)
        return [culled for culled in report.culled if culled[0] in (idle, busy)]

    async def reason_of(user, moment):
        report = await user_report(api, pod_source, QuotaPolicy(), settings, user, clock=lambda: moment)
        return report["culling"][""]["deadline"]["reason"]

    try:
        assert await culled_at(now) == []  # no training waits
        assert await reason_of(idle, now) == "idle"
        with training_waits(testbed, {"fracnb.io/pool": f"other-{secrets.token_hex(2)}"}):
            assert await culled_at(now) == [], "training that cannot run on the borrowed pool is no demand"
        with training_waits(testbed, TRAINING):
            assert await reason_of(idle, now) == "demand"  # what api/me tells its notebook, which warns the user
            assert await culled_at(now) == [(idle, "", "demand")]
            assert not hub.server_running(idle)
            assert hub.server_running(busy)
    finally:
        for user in (idle, busy):
            hub.api("DELETE", f"users/{user}/server")
            testbed.delete_pod(hub_namespace, f"jupyter-{user}", grace_seconds=0)
        api.close()
