"""The GPU queue as a hub whose ServiceAccount has z2jh's hub Role and helm-values/rbac.yaml's rules only (the
testbed's apiserver authorizes with RBAC). The chart's Role has no patch on pods, and lifting a queued pod's
scheduling gate is a patch: without the Role ``fracnb-hub-pod-patch`` a queued spawn never starts and the hub
log names the rule to add; with it, the spawn starts when a slot frees."""

from __future__ import annotations

import asyncio
import logging

import pytest

from fracnb_testbed.procs import wait_until_async
from tests.spawner_k8s.rbac import hub_with_rules
from tests.spawner_k8s.test_dra_rbac import CHART_POD_RULES, pod_patch_rules, rules_of_rbac_yaml
from tests.spawner_k8s.test_queue import fill_every_slot, gated, in_group, quarter_config

pytestmark = pytest.mark.k8s


async def queued_spawn(cluster_spawner, testbed, namespace: str, api, user: str):
    spawner = in_group(cluster_spawner({"profile": "quarter"}, user=user, config=quarter_config(max_wait=60)))
    spawner.api = api
    starting = asyncio.ensure_future(spawner.start())
    await wait_until_async(lambda: gated(testbed, namespace, spawner.pod_name), what="the pod gated", timeout=60)
    return spawner, starting


@pytest.mark.parametrize("with_patch", [True, False], ids=["rbac.yaml", "chart-only"])
async def test_a_queued_spawn_starts_at_its_turn_only_with_patch_on_pods(
    cluster_spawner, testbed, k8s_namespace, caplog, with_patch
) -> None:
    caplog.set_level(logging.WARNING)
    fillers = await fill_every_slot(testbed, k8s_namespace)
    rules = CHART_POD_RULES + (pod_patch_rules() if with_patch else [])
    async with hub_with_rules(
        testbed, k8s_namespace, rules, rules_of_rbac_yaml("ClusterRole", "fracnb-hub-reader")
    ) as api:
        spawner, starting = await queued_spawn(cluster_spawner, testbed, k8s_namespace, api, "quinn")
        testbed.delete_pod(k8s_namespace, fillers[0], grace_seconds=0)
        if with_patch:
            await asyncio.wait_for(starting, timeout=60)
            assert not gated(testbed, k8s_namespace, spawner.pod_name)
        else:
            missing = f"the hub needs patch on pods in {k8s_namespace}: the Role fracnb-hub-pod-patch"
            await wait_until_async(
                lambda: any(missing in message for message in caplog.messages),
                what="the hub log to name the missing rule",
                timeout=60,
            )
            assert gated(testbed, k8s_namespace, spawner.pod_name)
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
        await spawner.stop()
