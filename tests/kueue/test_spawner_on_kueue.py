"""FractionalSpawner with ``c.FracnbQueue.engine = "kueue"`` on the real Kueue: the team's quota admits one
quarter GPU, the next spawn waits with Kueue's reason and place on its progress page and starts when the
first server goes; the maximum wait and Kueue down end a spawn cleanly; a stop while Kueue is down ends after a
bound; a server Kueue preempts leaves a stop notice; a notebook takes its team's quota back from batch; the hub keeps
each user's cap, which Kueue has not."""

from __future__ import annotations

import asyncio
import html
from types import SimpleNamespace

import pytest
from tornado import web

from fracnb_spawner.queue.kueue import model as kueue
from fracnb_testbed import kueue as testbed_kueue
from fracnb_testbed.procs import wait_until_async
from tests.kueue.objects import cluster_queue, create, ensure_priority_class, flavor, gates, gpu_pod, local_queue
from tests.kueue.spawns import kueue_config, one_quarter_team, pod, watch_headlines

ADMISSION_GATE = "kueue.x-k8s.io/admission"
MANAGED_FINALIZER = "kueue.x-k8s.io/managed"


async def test_the_next_spawn_waits_for_the_teams_quota_in_words_and_starts_when_it_frees(
    kueue_spawner, kueue_testbed, kueue_namespace
):
    testbed, ns = kueue_testbed, kueue_namespace
    team = one_quarter_team(testbed, ns, ["ann", "bob"])
    ann = kueue_spawner({"profile": "quarter"}, user="ann", config=kueue_config(testbed))
    bob = kueue_spawner({"profile": "quarter"}, user="bob", config=kueue_config(testbed))
    assert isinstance(await ann.start(), str)
    labels = pod(testbed, ns, ann.pod_name)["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "fracnb-ann"
    assert labels["kueue.x-k8s.io/priority-class"] == "fracnb-notebook"
    spec = pod(testbed, ns, ann.pod_name)["spec"]
    assert spec["terminationGracePeriodSeconds"] >= 45 + kueue.AFTER_SAVE_SECONDS
    environment = {variable["name"]: variable.get("value") for variable in spec["containers"][0]["env"]}
    assert int(environment["FRACNB_STOP_HIBERNATION_TIMEOUT"]) >= 45  # the notebook saves when preempted
    # Bob's form says before he starts that a 0.25 GPU would wait: team's quota is ann's, nothing to borrow.
    wanted = f"queue: 0 waiting for {team}'s 0.25 GPU (all in use), no estimate"

    async def form_says_it_would_wait() -> bool:
        return wanted in html.unescape(await bob.render_options_form())

    await wait_until_async(form_says_it_would_wait, what=f"bob's form to say {wanted!r}", timeout=30)
    waiting = asyncio.ensure_future(bob.start())
    headlines, watcher = watch_headlines(bob, waiting)
    await wait_until_async(
        lambda: any("next in line" in h for h in headlines), what="bob's place and reason on his page", timeout=60
    )
    assert ADMISSION_GATE in gates(pod(testbed, ns, bob.pod_name))
    assert f"waiting for 0.25 GPU of {team}'s quota" in headlines[-1]
    await ann.stop(now=True)
    assert isinstance(await asyncio.wait_for(waiting, 60), str)
    assert not gates(pod(testbed, ns, bob.pod_name))
    watcher.cancel()
    await asyncio.gather(watcher, return_exceptions=True)
    await bob.stop(now=True)


async def test_the_maximum_wait_ends_the_spawn_and_removes_its_pod(kueue_spawner, kueue_testbed, kueue_namespace):
    testbed, ns = kueue_testbed, kueue_namespace
    one_quarter_team(testbed, ns, ["cara", "dan"])
    cara = kueue_spawner({"profile": "quarter"}, user="cara", config=kueue_config(testbed))
    assert isinstance(await cara.start(), str)
    dan = kueue_spawner({"profile": "quarter"}, user="dan", config=kueue_config(testbed, max_wait=3))
    with pytest.raises(web.HTTPError) as refused:
        await dan.start()
    assert "became free within 3 s" in refused.value.jupyterhub_message
    await wait_until_async(lambda: pod(testbed, ns, dan.pod_name) is None, what="dan's pod to go", timeout=60)
    await cara.stop(now=True)


async def test_kueue_down_refuses_a_gpu_spawn_within_seconds(kueue_spawner, kueue_testbed, kueue_namespace):
    testbed, ns = kueue_testbed, kueue_namespace
    one_quarter_team(testbed, ns, ["eve"])
    eve = kueue_spawner({"profile": "quarter"}, user="eve", config=kueue_config(testbed))
    testbed_kueue.stop_manager(testbed.state.directory)
    try:
        loop = asyncio.get_running_loop()
        began = loop.time()
        with pytest.raises(web.HTTPError) as refused:
            await eve.start()
        took = loop.time() - began
    finally:
        testbed_kueue.restart_manager(testbed.state.directory)
    assert refused.value.status_code == 503
    assert "Kueue, the cluster's GPU queue, did not answer" in refused.value.jupyterhub_message
    assert took < 15
    assert pod(testbed, ns, eve.pod_name) is None
    assert eve.hub_state.ledger.reserved("eve", "") is None


VALIDATING = (
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/kueue-validating-webhook-configuration"
)
NOT_BEING_DELETED = [{"name": "not-being-deleted", "expression": "!has(object.metadata.deletionTimestamp)"}]


async def stop_with_kueue_down(testbed, spawner) -> float:
    """Stop ``spawner``'s running server while Kueue's manager is down; the seconds the stop took. Kueue is
    started again only after the checks that need it down, by the caller."""
    assert MANAGED_FINALIZER in pod(testbed, spawner.namespace, spawner.pod_name)["metadata"]["finalizers"]
    testbed_kueue.stop_manager(testbed.state.directory)
    loop = asyncio.get_running_loop()
    began = loop.time()
    await spawner.stop(now=True)  # KubeSpawner's own wait for the pod's end is start_timeout, minutes here
    return loop.time() - began


def pod_hook_conditions(testbed, conditions) -> None:
    """Set (None: remove) the matchConditions of Kueue's validating pod webhook, as a site would."""
    configuration = testbed.get(VALIDATING)
    for hook in configuration["webhooks"]:
        if hook["name"] == "vpod.kb.io":
            hook.pop("matchConditions", None)
            if conditions:
                hook["matchConditions"] = conditions
    status, answer = testbed._call("PUT", VALIDATING, configuration)
    assert status == 200, answer


def bounded_config(testbed):
    config = kueue_config(testbed)
    config.FracnbQueue.kueue_finalizer_timeout = 3
    return config


async def test_a_stop_while_kueue_is_down_ends_after_the_bound_and_the_pod_goes_when_kueue_is_back(
    kueue_spawner, kueue_testbed, kueue_namespace, caplog
):
    testbed, ns = kueue_testbed, kueue_namespace
    one_quarter_team(testbed, ns, ["fay"])
    fay = kueue_spawner({"profile": "quarter"}, user="fay", config=bounded_config(testbed))
    assert isinstance(await fay.start(), str)
    try:
        took = await stop_with_kueue_down(testbed, fay)
        left = pod(testbed, ns, fay.pod_name)
    finally:
        testbed_kueue.restart_manager(testbed.state.directory)
    assert 3 <= took < 15
    # Kueue's pod webhook, down with its manager, refuses the hub's patch: the pod waits for Kueue.
    assert left["metadata"]["deletionTimestamp"]
    assert MANAGED_FINALIZER in left["metadata"]["finalizers"]
    assert "the stop ends and the pod stays Terminating until Kueue is back" in caplog.text
    await wait_until_async(lambda: pod(testbed, ns, fay.pod_name) is None, what="Kueue back: the pod gone", timeout=60)


async def test_where_kueues_webhook_lets_pods_being_deleted_pass_the_hub_removes_the_finalizer(
    kueue_spawner, kueue_testbed, kueue_namespace, caplog
):
    testbed, ns = kueue_testbed, kueue_namespace
    one_quarter_team(testbed, ns, ["gus"])
    gus = kueue_spawner({"profile": "quarter"}, user="gus", config=bounded_config(testbed))
    assert isinstance(await gus.start(), str)
    pod_hook_conditions(testbed, NOT_BEING_DELETED)
    try:
        took = await stop_with_kueue_down(testbed, gus)
        gone = pod(testbed, ns, gus.pod_name) is None
    finally:
        testbed_kueue.restart_manager(testbed.state.directory)
        pod_hook_conditions(testbed, None)
    assert 3 <= took < 15
    assert gone
    assert "removed the finalizer so that the stop ends" in caplog.text


async def test_a_server_kueue_preempts_says_why_on_the_next_form(kueue_spawner, kueue_testbed, kueue_namespace):
    testbed, ns = kueue_testbed, kueue_namespace
    team = one_quarter_team(testbed, ns, ["hal"])
    ensure_priority_class(testbed, "urgent-batch", 5000)
    hal = kueue_spawner({"profile": "quarter"}, user="hal", config=kueue_config(testbed))
    assert isinstance(await hal.start(), str)
    testbed.create_pod(ns, gpu_pod("urgent", "fracnb-hal", priority_class="urgent-batch"))

    def being_deleted():
        return ((hal.queue.reflected_pod() or {}).get("metadata") or {}).get("deletionTimestamp")

    await wait_until_async(being_deleted, what="Kueue to preempt hal's server for the urgent job", timeout=60)
    assert await hal.poll() == 0
    notice = hal.hub_state.stops.of_server("hal", "")
    assert f"preempted by a higher-priority job of {team}" in notice.details["text"]


async def test_a_notebook_takes_its_teams_quota_back_from_batch(kueue_spawner, kueue_testbed, kueue_namespace):
    testbed, ns = kueue_testbed, kueue_namespace
    one_quarter_team(testbed, ns, ["ivy"])
    ensure_priority_class(testbed, "fracnb-batch", 10)  # as helm-values/kueue/queues.yaml ships it
    testbed.create_pod(ns, gpu_pod("train", "fracnb-ivy", priority_class="fracnb-batch"))
    await wait_until_async(
        lambda: not gates(pod(testbed, ns, "train")), what="Kueue to admit the batch job", timeout=60
    )
    ivy = kueue_spawner({"profile": "quarter"}, user="ivy", config=kueue_config(testbed))
    assert isinstance(await asyncio.wait_for(ivy.start(), 90), str)  # Kueue preempted the job for her
    await wait_until_async(lambda: pod(testbed, ns, "train") is None, what="the batch job's pod to go", timeout=60)
    await ivy.stop(now=True)


async def test_the_hub_keeps_the_per_user_cap_that_kueue_has_not(kueue_spawner, kueue_testbed, kueue_namespace):
    testbed, ns = kueue_testbed, kueue_namespace
    ensure_priority_class(testbed, "fracnb-notebook", 1000)
    create(testbed, flavor(f"{ns}-flavor"))
    create(testbed, cluster_queue(f"{ns}-team", f"{ns}-flavor", f"{ns}-alone", 500))  # room for two quarters
    create(testbed, local_queue(ns, "fracnb-kim", f"{ns}-team"))
    config = kueue_config(testbed)
    config.FracnbQuotas.user_quotas = {"kim": "1/4"}
    first = kueue_spawner({"profile": "quarter"}, user="kim", config=config)
    first.user.groups = []  # in no JupyterHub group: her own cap only
    assert isinstance(await first.start(), str)
    second = kueue_spawner({"profile": "quarter"}, user="kim", config=config)
    second.orm_spawner = SimpleNamespace(name="second", display_name="", started=None, server=None)  # named
    second.pod_name, second.user.groups = "jupyter-kim--second", []
    with pytest.raises(web.HTTPError) as refused:
        await second.start()
    assert refused.value.status_code == 403
    assert "Over GPU quota" in (getattr(refused.value, "message", "") or refused.value.log_message)
    assert pod(testbed, ns, "jupyter-kim--second") is None  # refused before any pod, whatever Kueue's quota
    await first.stop(now=True)
