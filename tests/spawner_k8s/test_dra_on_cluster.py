"""The dra backend on the testbed's ``dra`` cluster: GPUs published as ResourceSlices, claims made
from the spawner's templates by kube-controller-manager and allocated by the real kube-scheduler."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from tornado import web
from traitlets.config import Config

from fracnb_spawner.form import rows as form
from fracnb_spawner.form import spawnform
from fracnb_testbed.procs import wait_until_async
from tests.spawner.examples import env_of
from tests.spawner_k8s.dra import A100, allocation_of, claims_in, create_claim, templates_in
from tests.spawner_k8s.helpers import form_shows

pytestmark = pytest.mark.k8s


async def test_four_quarters_fill_an_80gib_gpu_the_fifth_waits_and_starts_once_one_stops(
    dra_spawner, dra_testbed, dra_namespace
) -> None:
    config = Config()
    config.FractionalSpawner.start_timeout = 60
    # Never queued (test_dra_queue.py queues): the scheduler itself finds the A100 full.
    config.FractionalSpawner.profile_list = [
        {"display_name": "A100 quarter", "slug": "quarter", "queue": {"max_wait": 0},
         "gpu": {"fraction": 0.25, "backend": "dra", "product": A100}},
    ]  # fmt: skip
    spawners = [dra_spawner({"profile": "quarter"}, user=f"user{i}", config=Config(config)) for i in range(5)]
    for spawner in spawners[:4]:
        await spawner.start()
    results = [allocation_of(dra_testbed, dra_namespace, spawner.pod_name) for spawner in spawners[:4]]
    # All four on the one A100, each consuming 20 GiB of its 80 GiB.
    assert {(r["pool"], r["device"]) for r in results} == {("a100-dra-0", "gpu-0")}
    assert [r["consumedCapacity"] for r in results] == [{"memory": "20Gi"}] * 4
    waiting = spawners[4]
    start = asyncio.ensure_future(waiting.start())
    messages: list[str] = []

    async def collect() -> None:
        async for event in waiting.progress():
            messages.append(event["message"])
            if "Waiting for a free 0.25 GPU" in event["message"]:
                return

    await asyncio.wait_for(collect(), timeout=30)
    assert not start.done()
    assert any("Waiting for a free 0.25 GPU (dra) slot on a NVIDIA-A100-SXM4-80GB" in m for m in messages), messages
    await spawners[0].stop()
    assert (await asyncio.wait_for(start, timeout=45)).startswith("http://")
    assert allocation_of(dra_testbed, dra_namespace, waiting.pod_name)["device"] == "gpu-0"
    for spawner in spawners[1:]:
        await spawner.stop()
    await wait_until_async(
        lambda: claims_in(dra_testbed, dra_namespace) == [], what="the claims to go with their pods", timeout=30
    )
    assert templates_in(dra_testbed, dra_namespace) == []


async def test_a_mig_claim_lands_only_on_a_device_with_that_profile(dra_spawner, dra_testbed, dra_namespace) -> None:
    spawner = dra_spawner({"profile": "mig"}, user="mig")
    await spawner.start()
    result = allocation_of(dra_testbed, dra_namespace, spawner.pod_name)
    assert result["pool"] == "a100-mig-0"
    assert "-mig-1g-10gb-" in result["device"]
    env = env_of(await spawner.get_pod_manifest())
    assert (env["FRACNB_GPU_BACKEND"], env["FRACNB_ISOLATION"]) == ("dra", "hard")
    await spawner.stop()


async def test_a_mig_profile_no_device_has_is_refused_at_once_or_waits_when_asked(
    dra_spawner, dra_testbed, dra_namespace
) -> None:
    spawner = dra_spawner({"profile": "mig-absent"}, user="absent")
    with pytest.raises(web.HTTPError) as caught:
        await asyncio.wait_for(spawner.start(), timeout=15)
    assert caught.value.status_code == 503
    assert caught.value.jupyterhub_message == (
        "No node in this cluster offers 2g.20gb MIG slice, so it cannot start; choose another option, or ask your hub admin"
    )
    assert claims_in(dra_testbed, dra_namespace) == []
    rows = await spawnform.annotate(
        spawner.choosing, profiles := await spawner.resolve_profiles(), form.describe(profiles, spawner.gpu_defaults())
    )
    assert (rows[("mig-absent", None, None)].allowed, rows[("mig", None, None)].free) == (False, 2)
    await spawner.stop()

    config = Config()
    config.FractionalSpawner.start_timeout = 60
    config.FractionalSpawner.refuse_unplaceable_choices = False  # e.g. the MIG layout may change
    waiting = dra_spawner({"profile": "mig-absent"}, user="absent", config=config)
    start = asyncio.ensure_future(waiting.start())

    def refused() -> bool:
        events = dra_testbed.events_for(dra_namespace, waiting.pod_name)
        return any(event.get("reason") == "FailedScheduling" for event in events)

    await wait_until_async(refused, what="the scheduler's refusal", timeout=30)
    assert not start.done()
    start.cancel()
    await asyncio.gather(start, return_exceptions=True)
    await waiting.stop()


async def test_hub_restart_then_stop_leaves_no_claim_or_template(dra_spawner, dra_testbed, dra_namespace) -> None:
    first = dra_spawner({"profile": "any-quarter"}, user="restart")
    await first.start()
    (claim,) = claims_in(dra_testbed, dra_namespace)
    assert claim["metadata"]["name"] == f"{first.pod_name}-gpu"
    assert [ref["kind"] for ref in claim["metadata"]["ownerReferences"]] == ["Pod"]  # owned once the start returns
    state = first.get_state()
    fresh = dra_spawner({}, user="restart")  # a new hub process: only the saved state
    fresh.load_state(state)
    assert await fresh.poll() is None
    await fresh.stop()
    await wait_until_async(
        lambda: claims_in(dra_testbed, dra_namespace) == [], what="the claim to go with its pod", timeout=30
    )
    assert templates_in(dra_testbed, dra_namespace) == []


async def test_the_forms_free_count_matches_what_the_scheduler_allocates(
    dra_spawner, dra_testbed, dra_namespace
) -> None:
    config = Config()
    config.FractionalSpawner.profile_list = [
        {
            "display_name": "A100 quarter",
            "slug": "quarter",
            "gpu": {"fraction": 0.25, "backend": "dra", "product": A100},
            "queue": {"max_wait": 0},  # the scheduler, not the hub's queue, says the fifth does not fit
        }
    ]
    config.FractionalSpawner.start_timeout = 60

    def viewer():
        return dra_spawner({}, user="viewer", config=Config(config))

    await form_shows(viewer, 4)  # the one A100's 80 GiB in 20 GiB slices
    running = []
    for i in range(4):
        spawner = dra_spawner({"profile": "quarter"}, user=f"fill{i}", config=Config(config))
        await spawner.start()
        running.append(spawner)
        await form_shows(viewer, 3 - i)
    extra = dra_spawner({"profile": "quarter"}, user="extra", config=Config(config))
    start = asyncio.ensure_future(extra.start())
    await wait_until_async(
        lambda: any(
            e.get("reason") == "FailedScheduling" for e in dra_testbed.events_for(dra_namespace, extra.pod_name)
        ),
        what="the fifth pod's scheduling failure",
        timeout=30,
    )
    assert not start.done(), "the form said 0 free and the scheduler agrees: the fifth pod waits"
    await running[0].stop()
    await asyncio.wait_for(start, timeout=45)
    await form_shows(viewer, 0)
    for spawner in [*running[1:], extra]:
        await spawner.stop()
    await form_shows(viewer, 4)


async def test_quotas_count_dra_fractions_like_any_fraction(dra_spawner, dra_namespace) -> None:
    config = Config()
    config.FracnbQuotas.group_quotas = {"team-a": 0.5}
    names = ["ann", "bob", "cat"]
    team = SimpleNamespace(name="team-a", users=[SimpleNamespace(name=n) for n in names])
    spawners = [dra_spawner({"profile": "any-quarter"}, user=name, config=Config(config)) for name in names]
    for spawner in spawners:
        spawner.user.groups = [team]
    await spawners[0].start()
    await spawners[1].start()
    with pytest.raises(web.HTTPError) as caught:
        await spawners[2].start()
    assert caught.value.status_code == 403
    message = getattr(caught.value, "message", "") or caught.value.log_message
    assert "team-a uses 0.5 of 0.5 GPU; this choice needs 0.25 GPU" in message
    for spawner in spawners[:2]:
        await spawner.stop()


async def test_a_leftover_pod_of_the_same_name_is_replaced_and_the_new_one_gets_its_claim(
    dra_spawner, dra_testbed, dra_namespace
) -> None:
    spawner = dra_spawner({"profile": "any-quarter"}, user="leftover")
    leftover = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": spawner.pod_name},
        "spec": {"containers": [{"name": "old", "image": "example.invalid/old"}]},
    }
    old = dra_testbed.create_pod(dra_namespace, leftover)
    # A hub that died after making both left the old pod's claim too, asking for a whole GPU.
    old_owner = {"apiVersion": "v1", "kind": "Pod", "name": spawner.pod_name, "uid": old["metadata"]["uid"]}
    old_claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"{spawner.pod_name}-gpu", "ownerReferences": [old_owner]},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    }
    create_claim(dra_testbed, dra_namespace, old_claim)
    # KubeSpawner meets the name taken (409), stops the old pod (the garbage collector then removes
    # its claim), and creates the pod again: the new pod gets a claim of its own, owned by it.
    await spawner.start()
    assert allocation_of(dra_testbed, dra_namespace, spawner.pod_name)["consumedCapacity"] == {"memory": "20Gi"}
    (claim,) = claims_in(dra_testbed, dra_namespace)
    (pod,) = [p for p in dra_testbed.list_pods(dra_namespace) if p["metadata"]["name"] == spawner.pod_name]
    assert [ref["uid"] for ref in claim["metadata"]["ownerReferences"]] == [pod["metadata"]["uid"]]
    assert pod["metadata"]["uid"] != old["metadata"]["uid"]
    await spawner.stop()
    await wait_until_async(
        lambda: claims_in(dra_testbed, dra_namespace) == [], what="the claim to go with its pod", timeout=30
    )


async def test_the_dra_free_count_honours_the_profiles_node_selector(dra_spawner, dra_testbed, dra_namespace) -> None:
    config = Config()
    config.FractionalSpawner.profile_list = [
        {"display_name": "Any quarter", "slug": "any", "gpu": {"fraction": 0.25, "backend": "dra"}},
        {
            "display_name": "Quarter on one node",
            "slug": "pinned",
            "gpu": {"fraction": 0.25, "backend": "dra"},
            "kubespawner_override": {"node_selector": {"kubernetes.io/hostname": "h100-dra-0"}},
        },
    ]
    viewer = dra_spawner({}, user="viewer", config=Config(config))
    rows = await spawnform.annotate(
        viewer.choosing, profiles := await viewer.resolve_profiles(), form.describe(profiles, viewer.gpu_defaults())
    )
    assert rows[("any", None, None)].free == 8  # the A100's and the H100's 80 GiB
    assert rows[("pinned", None, None)].free == 4  # only the devices of the node the profile selects
    spawner = dra_spawner({"profile": "pinned"}, user="pinned", config=Config(config))
    await spawner.start()
    assert allocation_of(dra_testbed, dra_namespace, spawner.pod_name)["pool"] == "h100-dra-0"
    (pod,) = [p for p in dra_testbed.list_pods(dra_namespace) if p["metadata"]["name"] == spawner.pod_name]
    assert pod["metadata"]["labels"]["fracnb.io/slot-kind"] == "gpu.nvidia.com.any.h100-dra-0"
    await spawner.stop()
