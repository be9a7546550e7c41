"""FractionalSpawner's real start()/stop() against the testbed's kube-apiserver and kube-scheduler."""

from __future__ import annotations

import asyncio
import time

import pytest
from tornado import web
from traitlets.config import Config

pytestmark = pytest.mark.k8s

# profile slug -> node group the real scheduler must pick
PLACEMENT = {
    "quarter": ("a100-ts4",),
    "eighth": ("a100-ts8",),
    "mps": ("a100-mps",),
    "mig": ("a100-mig",),
    "hami": ("a100-hami",),
    "whole": ("a100-whole",),
}


def node_group(node_name: str) -> str:
    return node_name.rsplit("-", 1)[0]


@pytest.mark.parametrize("slug", sorted(PLACEMENT))
async def test_start_binds_to_the_right_kind_of_node(cluster_spawner, testbed, k8s_namespace, slug: str) -> None:
    spawner = cluster_spawner({"profile": slug}, user=f"u-{slug}")
    url = await spawner.start()
    assert url.startswith("http://")
    (pod,) = [p for p in testbed.list_pods(k8s_namespace) if p["metadata"]["name"] == spawner.pod_name]
    assert pod["status"]["phase"] == "Running"
    assert node_group(pod["spec"]["nodeName"]) in PLACEMENT[slug]
    assert pod["metadata"]["labels"]["fracnb.io/profile"] == slug
    assert "fracnb.io/gpu-fraction" in pod["metadata"]["annotations"]
    await spawner.stop()
    await testbed.wait_for_pod(k8s_namespace, spawner.pod_name, lambda p: p is None, timeout=30)


async def test_kai_pod_carries_fraction_annotation(cluster_spawner, testbed, k8s_namespace) -> None:
    spawner = cluster_spawner({"profile": "kai"})
    await spawner.start()
    pod = next(p for p in testbed.list_pods(k8s_namespace) if p["metadata"]["name"] == spawner.pod_name)
    assert pod["spec"]["schedulerName"] == "kai-scheduler"
    assert pod["metadata"]["annotations"]["gpu-fraction"] == "0.25"
    assert pod["metadata"]["labels"]["kai.scheduler/queue"] == "default-queue"
    await spawner.stop()


async def test_four_quarters_share_a_gpu_and_the_fifth_waits(cluster_spawner, testbed, k8s_namespace) -> None:
    config = Config()
    # The local 4-way node has one GPU: four 0.25 notebooks fill it.
    config.FractionalSpawner.node_selector = {"fracnb.io/runner": "local"}
    config.FractionalSpawner.cmd = ["python3", "-c", "import time; time.sleep(600)"]
    config.FractionalSpawner.start_timeout = 60
    spawners = [cluster_spawner({"profile": "quarter"}, user=f"user{i}", config=Config(config)) for i in range(5)]
    for spawner in spawners[:4]:
        await spawner.start()
    waiting = spawners[4]
    start = asyncio.ensure_future(waiting.start())
    messages: list[str] = []

    async def collect() -> None:
        async for event in waiting.progress():
            messages.append(event["message"])
            if "Queued for a 0.25 GPU" in event["message"]:
                return

    await asyncio.wait_for(collect(), timeout=30)
    assert not start.done()
    # The fifth waits in the GPU queue (its pod gated) and starts as soon as a quarter frees.
    assert any(m.startswith("Queued for a 0.25 GPU (time-slicing): 1st in line.") for m in messages), messages
    pod = next(p for p in testbed.list_pods(k8s_namespace) if p["metadata"]["name"] == waiting.pod_name)
    assert pod["spec"]["schedulingGates"] == [{"name": "fracnb.io/queue"}]
    await spawners[0].stop()
    assert (await asyncio.wait_for(start, timeout=45)).startswith("http://")
    for spawner in spawners[1:]:
        await spawner.stop()


async def test_choice_no_node_offers_is_refused_at_once(cluster_spawner, testbed, k8s_namespace) -> None:
    spawner = cluster_spawner({"profile": "huge"})
    started = time.monotonic()
    with pytest.raises(web.HTTPError) as caught:
        await asyncio.wait_for(spawner.start(), timeout=15)
    assert time.monotonic() - started < 15
    assert caught.value.status_code == 503
    assert caught.value.jupyterhub_message == (
        "No node in this cluster offers 64 GPUs, so it cannot start; choose another option, or ask your hub admin"
    )
    assert testbed.list_pods(k8s_namespace) == []
    await spawner.stop()


async def test_unschedulable_spawn_fails_plainly_before_the_hub_timeout(cluster_spawner, caplog) -> None:
    config = Config()
    config.FractionalSpawner.start_timeout = 10
    config.FractionalSpawner.refuse_unplaceable_choices = False  # e.g. an autoscaler could add the node
    spawner = cluster_spawner({"profile": "huge"}, config=config)
    with pytest.raises(web.HTTPError) as caught:
        await asyncio.wait_for(spawner.start(), timeout=10)
    assert caught.value.status_code == 503
    assert caught.value.jupyterhub_message == (
        "No node could take 64 GPUs within 10 s: no node in this cluster offers it. "
        "Choose another option, or ask your hub admin."
    )
    # The scheduler's own text is for admins: the hub log (and the spawn's event log), not the headline.
    assert "nodes are available" in caplog.text
    await spawner.stop()


async def test_hub_restart_finds_running_pod_and_stops_it(cluster_spawner, testbed, k8s_namespace) -> None:
    first = cluster_spawner({"profile": "eighth"}, user="restart")
    await first.start()
    state = first.get_state()
    fresh = cluster_spawner({}, user="restart")
    fresh.load_state(state)
    assert fresh.spawn_plan is not None
    assert str(fresh.spawn_plan.fraction) == "1/8"
    assert await fresh.poll() is None
    await fresh.stop()
    await testbed.wait_for_pod(k8s_namespace, first.pod_name, lambda p: p is None, timeout=30)
    assert [p for p in testbed.list_pods(k8s_namespace) if p["metadata"]["name"] == first.pod_name] == []
