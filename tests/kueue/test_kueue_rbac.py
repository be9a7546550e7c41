"""The kueue engine as a hub whose ServiceAccount has only z2jh's pod rights and the rules of
helm-values/rbac.yaml's ClusterRole ``fracnb-hub-kueue`` (the testbed's apiserver and Kueue's visibility
API both authorize with RBAC): the waiting spawn's page has Kueue's reason and place, which take every
read the engine makes, the spawn form its team's quota, the fracnb service Kueue's demand, and the spawn starts
when the quota frees."""

from __future__ import annotations

import asyncio
import html
from pathlib import Path

import yaml

from fracnb_spawner.service.pods import KubernetesPods
from fracnb_testbed.procs import wait_until_async
from tests.kueue.objects import gates
from tests.kueue.spawns import kueue_config, one_quarter_team, pod, watch_headlines
from tests.spawner_k8s.rbac import hub_with_rules
from tests.spawner_k8s.test_dra_rbac import POD_RULES

RBAC_YAML = Path(__file__).resolve().parents[2] / "helm-values" / "rbac.yaml"


def kueue_rules_of_rbac_yaml() -> list[dict]:
    documents = yaml.safe_load_all(RBAC_YAML.read_text())
    (role,) = [d for d in documents if (d["kind"], d["metadata"]["name"]) == ("ClusterRole", "fracnb-hub-kueue")]
    return role["rules"]


async def test_the_rules_of_rbac_yaml_are_enough_for_the_kueue_engine(kueue_spawner, kueue_testbed, kueue_namespace):
    testbed, ns = kueue_testbed, kueue_namespace
    team = one_quarter_team(testbed, ns, ["ann", "bob"])
    async with hub_with_rules(testbed, ns, POD_RULES, kueue_rules_of_rbac_yaml()) as api:
        ann = kueue_spawner({"profile": "quarter"}, user="ann", config=kueue_config(testbed))
        bob = kueue_spawner({"profile": "quarter"}, user="bob", config=kueue_config(testbed))
        ann.api = bob.api = api
        assert isinstance(await ann.start(), str)
        waiting = asyncio.ensure_future(bob.start())
        headlines, watcher = watch_headlines(bob, waiting)
        await wait_until_async(
            lambda: any("next in line" in h and f"of {team}'s quota" in h for h in headlines),
            what="bob's place (visibility API) and reason (Workload, LocalQueue, ClusterQueues) on his page",
            timeout=60,
        )
        assert "kueue.x-k8s.io/admission" in gates(pod(testbed, ns, bob.pod_name))
        # The spawn form reads the team's quota; the fracnb service (the same account) Kueue's demand.
        assert f"waiting for {team}'s 0.25 GPU (all in use)" in html.unescape(await ann.render_options_form())
        service_pods = KubernetesPods(namespace=ns, kueue=True, core_api=api)
        demand = await service_pods.kueue_demand()
        assert f"{ns}/fracnb-ann" in demand, demand  # bob waits for quota ann's idle server could give back
        assert await service_pods.kueue_queues() is not None  # the page's team quotas
        await ann.stop(now=True)
        assert isinstance(await asyncio.wait_for(waiting, 60), str)
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await bob.stop(now=True)
