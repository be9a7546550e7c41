"""Two hub users whose names fold together, on the real Kueue: ``carol`` has a LocalQueue, ``carol_`` none. fracnb's
earlier rule named both ``fracnb-carol``, so carol_'s pod was admitted on carol's team quota; now carol_'s queue is
``fracnb-carol---dbfdf2f0``, and her spawn is refused before any pod while it is missing or annotated as someone
else's, then runs on her own queue once the admin creates it."""

from __future__ import annotations

import pytest
from kubespawner.slugs import safe_slug
from tornado import web

from fracnb_testbed.kueue import API
from tests.kueue.objects import cluster_queue, create, local_queue
from tests.kueue.spawns import kueue_config, one_quarter_team, pod

CAROL_S_QUEUE = "fracnb-carol---dbfdf2f0"  # carol_'s, by c.FracnbQueue.kueue_local_queue's default


def workloads(testbed, namespace) -> list[dict]:
    return testbed.get(f"{API}/namespaces/{namespace}/workloads")["items"]


async def refused(spawner) -> web.HTTPError:
    with pytest.raises(web.HTTPError) as caught:
        await spawner.start()
    return caught.value


async def test_a_user_whose_name_folds_into_anothers_is_never_admitted_on_that_users_queue(
    kueue_spawner, kueue_testbed, kueue_namespace
):
    testbed, ns = kueue_testbed, kueue_namespace
    team = one_quarter_team(testbed, ns, ["carol"])  # carol's queue, unannotated as on a site set up before
    config = kueue_config(testbed)
    impostor = kueue_spawner({"profile": "quarter"}, user="carol_", config=config)
    impostor.pod_name = f"jupyter-{safe_slug('carol_')}"  # as KubeSpawner names it
    refusal = await refused(impostor)
    assert refusal.status_code == 403
    assert f"Kueue has no LocalQueue {CAROL_S_QUEUE} in {ns}" in refusal.jupyterhub_message
    assert pod(testbed, ns, impostor.pod_name) is None
    assert workloads(testbed, ns) == [], "nothing in carol's queue, nor on her team's quota"
    assert impostor.hub_state.ledger.reserved("carol_", "") is None

    # The admin makes carol_'s queue, on a ClusterQueue of her own, but marks it as carol's by mistake.
    create(testbed, cluster_queue(f"{ns}-own", f"{ns}-flavor", f"{ns}-alone-too", 250))
    mistaken = local_queue(ns, CAROL_S_QUEUE, f"{ns}-own")
    mistaken["metadata"]["annotations"] = {"fracnb.io/hub-user": "carol"}
    create(testbed, mistaken)
    refusal = await refused(impostor)
    assert refusal.status_code == 403
    assert "belongs to hub user 'carol' (annotation fracnb.io/hub-user)" in refusal.jupyterhub_message
    assert pod(testbed, ns, impostor.pod_name) is None

    # Fixed: the queue marked as carol_'s; she runs on it, and carol keeps her team's quarter.
    marked = {"metadata": {"annotations": {"fracnb.io/hub-user": "carol_"}}}
    status, answer = testbed._call("PATCH", f"{API}/namespaces/{ns}/localqueues/{CAROL_S_QUEUE}", marked)
    assert status == 200, answer
    assert isinstance(await impostor.start(), str)
    assert pod(testbed, ns, impostor.pod_name)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == CAROL_S_QUEUE
    carol = kueue_spawner({"profile": "quarter"}, user="carol", config=config)
    assert isinstance(await carol.start(), str)  # her team's quarter was not taken
    assert pod(testbed, ns, carol.pod_name)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "fracnb-carol"
    admitted = {w["spec"]["queueName"]: w["status"]["admission"]["clusterQueue"] for w in workloads(testbed, ns)}
    assert admitted == {"fracnb-carol": team, CAROL_S_QUEUE: f"{ns}-own"}
    await carol.stop(now=True)
    await impostor.stop(now=True)
