"""The Kueue engine's pure pieces: labels, names, the grace period, refusals at start, the words
made of Kueue's Workload conditions (messages as Kueue v0.17 writes them), and the maximum wait on
the spawn queue's clock, and a pod waiting for Kueue across a hub restart: found by the service, taken
over (not replaced) by the resumed spawn."""

import asyncio
import logging
from datetime import datetime, timedelta
from fractions import Fraction
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest
from kubernetes_asyncio.client import V1ObjectMeta, V1Pod, V1PodSpec
from kubernetes_asyncio.client.exceptions import ApiException
from traitlets import TraitError
from traitlets.config import Config

from fracnb_spawner.cluster.refusals import start_refusal
from fracnb_spawner.common.errors import HubConfigError
from fracnb_spawner.common.podkeys import KUEUE_ADMISSION_GATE, KUEUE_QUEUE_LABEL
from fracnb_spawner.config.profiles import ProfileConfigError
from fracnb_spawner.configure import check_config
from fracnb_spawner.culling import Reason
from fracnb_spawner.gpu.plan import CPU_ONLY, GPUPlan
from fracnb_spawner.history.hubstopnotices import HubStops
from fracnb_spawner.queue.config import FracnbQueue
from fracnb_spawner.queue.kueue import model as kueue
from fracnb_spawner.queue.kueue.place import ADMISSION_GRACE_SECONDS
from fracnb_spawner.queue.kueue.stop import note_stop
from fracnb_spawner.queue.localqueues import local_queue_name
from fracnb_spawner.queue.releases import Release
from fracnb_spawner.queue.spawning import QueueTimeoutError, SpawnQueue
from fracnb_spawner.queue.text import kueue_message
from fracnb_spawner.service.resume import kept_places
from tests.spawner.queue.fakes import T0, FakeClock, FakeLocalQueues, ask, gated, local_queue, running

QUARTER = GPUPlan("time-slicing", Fraction(1, 4), 20 * 2**30)

# pkg/scheduler/flavorassigner/flavorassigner.go and pkg/scheduler/preemption/preemption.go, v0.17.0
PENDING = "couldn't assign flavors to pod set main: insufficient unused quota for fracnb.io/gpu-milli in flavor a100-ts4, 250 more needed"
PREEMPTED = (
    "Preempted to accommodate a workload (UID: 1f, JobUID: 2e) due to prioritization in the ClusterQueue; "
    "preemptor path: /university/team-b; preemptee path: /university/team-b"
)


def workload(*conditions, requests=None):
    status = {"conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions]}
    if requests is not None:
        status["resourceRequests"] = [{"name": "main", "resources": requests}]
    return {"status": status}


def cluster_queue(name, cohort, borrowed):
    usage = [{"name": "a100-ts4", "resources": [{"name": kueue.MILLI_RESOURCE, "total": "1000", "borrowed": borrowed}]}]
    return {"metadata": {"name": name}, "spec": {"cohortName": cohort}, "status": {"flavorsUsage": usage}}


def test_a_gpu_pod_gets_the_users_local_queue_and_a_priority_class():
    assert kueue.pod_labels(local_queue_name("fracnb-{username}", "Ann.Lee@uni"), 0) == {
        "kueue.x-k8s.io/queue-name": "fracnb-ann-lee-uni---10ce9928",
        "kueue.x-k8s.io/priority-class": "fracnb-notebook",
    }
    assert kueue.priority_class_name(10) == "fracnb-notebook-10"
    assert kueue.priority_class_name(-5) == "fracnb-notebook-minus-5"


def test_the_grace_period_covers_hibernation_and_the_stop_after_it():
    assert kueue.termination_grace(None, 120.5) == 121 + kueue.AFTER_SAVE_SECONDS
    assert kueue.termination_grace(300, 120) == 300
    assert kueue.termination_grace(None, 0) == 30  # hibernation off: Kubernetes' default


def test_the_notebook_is_told_to_save_at_its_stop_unless_hibernation_is_off():
    assert kueue.stop_hibernation_env(120.5) == {"FRACNB_STOP_HIBERNATION_TIMEOUT": "121"}
    assert kueue.stop_hibernation_env(0) == {}


def test_engine_settings_are_checked_with_the_key_named():
    assert FracnbQueue().engine == "builtin"
    with pytest.raises(TraitError, match="kueue_local_queue"):
        FracnbQueue(kueue_local_queue="Team_{username}")
    with pytest.raises(TraitError, match="engine"):
        FracnbQueue(engine="volcano")


@pytest.mark.parametrize(
    ("backend", "why"), [("dra", "cannot count DRA claims"), ("kai", "KAI's GPU fractions"), ("hami", "a HAMi share")]
)
def test_choices_kueue_cannot_count_are_refused_at_start(backend, why):
    config = Config()
    config.FracnbQueue.engine = "kueue"
    config.FractionalSpawner.profile_list = [
        {"display_name": "Quarter", "slug": "quarter", "gpu": {"fraction": 0.25}},
        {"display_name": "Other", "slug": "other", "gpu": {"fraction": 0.25, "backend": backend}},
    ]
    with pytest.raises(ProfileConfigError, match=why) as caught:
        check_config(config)
    assert "profile 'other'" in str(caught.value)
    config.FracnbQueue.engine = "builtin"
    check_config(config)


def test_the_waiting_reason_names_the_quota_and_who_borrows_it():
    pending = workload(("QuotaReserved", "False", "Pending", PENDING))
    queues = [
        cluster_queue("team-a", "uni", "0"),
        cluster_queue("team-b", "uni", "500"),
        cluster_queue("team-c", "uni", "0"),
    ]
    assert (
        kueue.waiting_reason(pending, "team-a", kueue.borrowers(queues, "team-a"))
        == "waiting for 0.25 GPU of team-a's quota; team-b is borrowing 0.5"
    )
    assert kueue.waiting_reason(None, "team-a") == "waiting for Kueue to look at this request"
    odd = workload(("QuotaReserved", "False", "Inadmissible", "LocalQueue fracnb-ann doesn't exist"))
    assert kueue.waiting_reason(odd, "team-a") == "waiting for Kueue: LocalQueue fracnb-ann doesn't exist"


def test_places_in_words():
    assert [kueue.place_words(p) for p in (None, 0, 1, 3)] == [
        "in the queue",
        "next in line",
        "1 ahead of you",
        "3 ahead of you",
    ]


def test_a_place_is_read_from_the_visibility_apis_answer_and_a_wrong_shape_raises():
    answer = {"items": [{"metadata": {"name": "pod-a"}, "positionInClusterQueue": 2},
                        {"metadata": {"name": "pod-b"}}]}  # fmt: skip
    assert kueue.position_in_cluster_queue(answer, "pod-a") == 2
    assert kueue.position_in_cluster_queue(answer, "pod-b") == 0
    assert kueue.position_in_cluster_queue(answer, "pod-c") is None
    assert kueue.position_in_cluster_queue(None, "pod-a") is None
    for wrong in ({"items": [{"name": "pod-a"}]}, {"items": [{"metadata": {"name": "pod-a"},
                  "positionInClusterQueue": "second"}]}, ["pod-a"], {"items": [None]}):  # fmt: skip
        with pytest.raises((KeyError, TypeError, ValueError, AttributeError)):
            kueue.position_in_cluster_queue(wrong, "pod-a")


def test_a_preemption_in_words_with_what_hibernation_saved():
    preempted = workload(
        ("Evicted", "True", "Preempted", "Preempted"), ("Preempted", "True", "InClusterQueue", PREEMPTED)
    )
    assert kueue.stop_reason(preempted, 41) == "preempted by a higher-priority job of team-b; 41 variables saved"
    assert kueue.stop_reason(preempted, None) == "preempted by a higher-priority job of team-b; nothing was saved"
    reclaimed = workload(("Evicted", "True", "Preempted", ""), ("Preempted", "True", "InCohortReclamation", PREEMPTED))
    assert kueue.stop_reason(reclaimed, 1) == "preempted by team-b taking back its own quota; 1 variable saved"
    assert kueue.stop_reason(workload(("Admitted", "True", "Admitted", "")), 3) is None


def test_demand_counts_only_workloads_not_admitted():
    waiting = workload(("QuotaReserved", "False", "Pending", PENDING), requests={kueue.MILLI_RESOURCE: "250"})
    admitted = workload(("QuotaReserved", "True", "QuotaReserved", ""), requests={kueue.MILLI_RESOURCE: "1k"})
    assert kueue.pending_milli([waiting, admitted, waiting]) == 500
    held = {**waiting, "spec": {"active": False}}  # deactivated by an admin or a back-off: it asks nothing now
    finished = workload(("Finished", "True", "Succeeded", ""), requests={kueue.MILLI_RESOURCE: "1k"})
    assert kueue.pending_milli([waiting, held, finished]) == 250


@pytest.mark.parametrize(
    ("written", "milli"), [("250", 250), (250, 250), ("1k", 1000), ("1.5k", 1500), ("2e3", 2000), ("1Ki", 1024)]
)
def test_quota_quantities_as_kueue_or_an_admin_writes_them(written, milli):
    assert kueue.milli_quantity(written) == milli


def test_a_quantity_that_is_not_one_is_a_clear_error():
    with pytest.raises(ValueError, match=r"'2 GPUs' is not a quantity of fracnb\.io/gpu-milli"):
        kueue.milli_quantity("2 GPUs")


def test_kueue_down_is_refused_in_words_naming_kueue():
    body = (
        '{"kind":"Status","message":"Internal error occurred: failed calling webhook \\"mpod.kb.io\\": failed to '
        'call webhook: Post \\"https://127.0.0.1:19443/mutate--v1-pod?timeout=10s\\": connection refused"}'
    )
    error = ApiException(status=500, reason="Internal Server Error")
    error.body = body
    refusal = start_refusal(error, pod_created=False)
    assert refusal.status_code == 503
    assert "Kueue, the cluster's GPU queue, did not answer" in refusal.message
    plain = ApiException(status=500, reason="Internal Server Error")
    plain.body = '{"message":"etcd timeout"}'
    assert "API server answered 500" in start_refusal(plain, pod_created=False).message


def kueue_spawn_queue(clock: FakeClock, max_wait: float, plan: GPUPlan = QUARTER) -> SpawnQueue:
    """Ann's spawn with engine "kueue", its pod (once labelled) gated by Kueue in the hub's pod watch."""
    pods: dict[str, dict] = {}
    host = SimpleNamespace(
        name="", namespace="jhub", pod_name="jupyter-ann", start_timeout=60, log=logging.getLogger("test"),
        user=SimpleNamespace(name="ann", groups=[]), config=Config(),
        api=SimpleNamespace(api_client=FakeLocalQueues(local_queue("jhub", "fracnb-ann", "ann"))),
        pod_reflector=SimpleNamespace(pods=pods), queue_settings=lambda: FracnbQueue(engine="kueue"),
    )  # fmt: skip
    queue = SpawnQueue(host, lambda: None, lambda user, server: None, clock=clock)
    queue.reset(ask(), max_wait=max_wait, plan=plan)
    pods[queue.key] = {
        "metadata": {"name": "jupyter-ann"},
        "spec": {"schedulingGates": [{"name": KUEUE_ADMISSION_GATE}]},
    }
    return queue


async def test_the_wait_in_kueues_queue_is_counted_on_the_spawn_queues_clock():
    clock = FakeClock()
    queue = kueue_spawn_queue(clock, max_wait=600)
    pod = V1Pod(metadata=V1ObjectMeta(name="jupyter-ann"), spec=V1PodSpec(containers=[]))
    await queue.join(None, pod)
    assert queue.place.queued_at == T0
    assert queue.place.remaining() == 600
    clock.advance(599)
    assert queue.place.remaining() == 1
    clock.advance(2)  # past the maximum wait on this clock, a moment after the start on the system's
    with pytest.raises(QueueTimeoutError):
        await queue.await_started(asyncio.get_running_loop().create_future())


async def test_a_profile_that_never_queues_still_waits_for_kueues_answer():
    clock = FakeClock()
    queue = kueue_spawn_queue(clock, max_wait=0)
    pod = V1Pod(metadata=V1ObjectMeta(name="jupyter-ann"), spec=V1PodSpec(containers=[]))
    await queue.join(None, pod)
    assert pod.metadata.labels[KUEUE_QUEUE_LABEL] == "fracnb-ann"  # it counts against the team's quota
    # Kueue's webhook gates the pod even when quota is free: its admission is not a wait in the queue
    assert queue.place.remaining() == ADMISSION_GRACE_SECONDS
    clock.advance(ADMISSION_GRACE_SECONDS + 1)
    with pytest.raises(QueueTimeoutError):
        await queue.await_started(asyncio.get_running_loop().create_future())


async def test_a_cpu_only_spawn_is_not_given_to_kueue():
    queue = kueue_spawn_queue(FakeClock(), max_wait=600, plan=CPU_ONLY)
    pod = V1Pod(metadata=V1ObjectMeta(name="jupyter-ann"), spec=V1PodSpec(containers=[]))
    await queue.join(None, pod)
    assert queue.place is None
    assert not pod.metadata.labels


SERVER_TOKEN = "t0k3n"


def waiting_for_kueue(user: str, queued_at: datetime) -> dict:
    """A pod a spawn before a hub restart left waiting for Kueue: Kueue's gate, fracnb's queue annotations."""
    made = gated(user, queued_at)
    made["spec"]["schedulingGates"] = [{"name": KUEUE_ADMISSION_GATE}, {"name": "kueue.x-k8s.io/topology"}]
    made["spec"]["containers"][0]["env"] = [{"name": "JUPYTERHUB_API_TOKEN", "value": SERVER_TOKEN}]
    return made


def test_a_resumed_spawn_takes_over_only_its_own_pod_still_waiting_for_kueue():
    kept = waiting_for_kueue("ann", T0)
    assert kueue.kept_server_token(kept, "ann", "") == SERVER_TOKEN
    assert kueue.kept_server_token(kept, "bob", "") is None, "another user's pod"
    assert kueue.kept_server_token(kept, "ann", "gpu") is None, "another server's pod"
    admitted = {**kept, "spec": {**kept["spec"], "schedulingGates": []}}
    assert kueue.kept_server_token(admitted, "ann", "") is None, "admitted: its start is not a queued one"
    going = {**kept, "metadata": {**kept["metadata"], "deletionTimestamp": "2026-11-23T14:00:00Z"}}
    assert kueue.kept_server_token(going, "ann", "") is None
    fracnb_gated = gated("ann", T0)  # fracnb's own queue replaces its pods and keeps the place itself
    assert kueue.kept_server_token(fracnb_gated, "ann", "") is None
    assert kueue.kept_server_token(None, "ann", "") is None


def test_a_resumed_spawn_of_another_choice_replaces_the_kept_pod():
    kept = waiting_for_kueue("ann", T0)
    kept["metadata"]["annotations"] |= {"fracnb.io/profile": "quarter", "fracnb.io/gpu-fraction": "1/4"}
    kept["spec"]["containers"][0]["image"] = "lab:1"
    same = {
        "metadata": {"annotations": dict(kept["metadata"]["annotations"])},
        "spec": {"containers": [{"image": "lab:1"}]},
    }
    assert kueue.kept_server_token(kept, "ann", "", same) == SERVER_TOKEN
    bigger = {**same, "metadata": {"annotations": same["metadata"]["annotations"] | {"fracnb.io/gpu-fraction": "1"}}}
    assert kueue.kept_server_token(kept, "ann", "", bigger) is None, "she picked 1 GPU since"
    other_image = {**same, "spec": {"containers": [{"image": "lab:2"}]}}
    assert kueue.kept_server_token(kept, "ann", "", other_image) is None


def test_the_service_resumes_a_spawn_waiting_for_kueue_in_queue_order():
    later, first = waiting_for_kueue("bob", T0), waiting_for_kueue("ann", T0 - timedelta(minutes=5))
    assert [p.user for p in kept_places([later, first], T0)] == ["ann", "bob"]
    assert kept_places([later], T0 + timedelta(seconds=600)) == [], "past its maximum wait"


def test_kueues_finalizer_comes_off_only_past_the_pods_grace_period_and_the_bound():
    deleting = {
        "metadata": {"deletionTimestamp": "2026-11-23T14:00:00Z", "finalizers": ["a/b", kueue.MANAGED_FINALIZER]}
    }
    assert kueue.stuck_finalizer_patch(deleting, T0 + timedelta(seconds=9), 10) is None
    assert kueue.stuck_finalizer_patch(deleting, T0 + timedelta(seconds=10), 10) == [
        {"op": "test", "path": "/metadata/finalizers/1", "value": kueue.MANAGED_FINALIZER},
        {"op": "remove", "path": "/metadata/finalizers/1"},
    ]
    not_deleted = {"metadata": {"finalizers": [kueue.MANAGED_FINALIZER]}}
    assert kueue.stuck_finalizer_patch(not_deleted, T0 + timedelta(hours=1), 10) is None
    released = {"metadata": {"deletionTimestamp": "2026-11-23T14:00:00Z", "finalizers": ["a/b"]}}
    assert kueue.stuck_finalizer_patch(released, T0 + timedelta(hours=1), 10) is None
    assert kueue.stuck_finalizer_patch(None, T0, 10) is None


def evicted_pod(reason: str, message: str) -> dict:
    """A running pod as Kueue v0.17 marks it just before deleting it (pod_controller.go ``Stop``)."""
    made = running("ann")
    made["metadata"]["deletionTimestamp"] = "2026-11-23T14:00:30Z"
    condition = {"type": "TerminationTarget", "status": "True", "reason": reason, "message": message}
    made["status"]["conditions"] = [{**condition, "lastTransitionTime": "2026-11-23T14:00:00Z"}]
    return made


def test_kueues_eviction_is_read_from_the_pods_own_condition():
    reclaimed = evicted_pod(
        "WorkloadEvictedDueToPreempted",
        PREEMPTED.replace("prioritization in the ClusterQueue", "reclamation within the cohort"),
    )
    assert kueue.pod_stop_reason(reclaimed, None) == "preempted by team-b taking back its own quota; nothing was saved"
    assert kueue.pod_stop_reason(evicted_pod("WorkloadEvictedDueToPreempted", PREEMPTED), 2) == (
        "preempted by a higher-priority job of team-b; 2 variables saved"
    )
    stopped = evicted_pod("WorkloadEvictedDueToClusterQueueStopped", "The ClusterQueue is stopped")
    assert kueue.pod_stop_reason(stopped, None) == (
        "stopped by Kueue (ClusterQueueStopped: The ClusterQueue is stopped); nothing was saved"
    )
    assert kueue.pod_stop_reason(running("ann"), None) is None, "a pod the hub stops itself"


def test_a_notebook_that_saves_at_its_stop_is_not_said_to_have_lost_its_variables():
    pod = evicted_pod("WorkloadEvictedDueToPreempted", PREEMPTED)
    pod["spec"]["containers"] = [
        {"name": "notebook", "env": [{"name": "FRACNB_STOP_HIBERNATION_TIMEOUT", "value": "120"}]}
    ]
    assert kueue.saves_at_stop(pod)
    assert kueue.pod_stop_reason(pod, None) == (
        "preempted by a higher-priority job of team-b; its idle notebooks were saving their variables as it stopped: "
        "open a notebook again to restore what was saved"
    )
    pod["spec"]["containers"][0]["env"][0]["value"] = "0"
    assert not kueue.saves_at_stop(pod)
    assert kueue.pod_stop_reason(pod, None).endswith("; nothing was saved")


def test_the_hubs_poll_keeps_kueues_eviction_once_as_the_servers_stop_notice():
    stops, lines = HubStops(), []
    host = SimpleNamespace(
        user=SimpleNamespace(name="ann"), name="", hub_state=SimpleNamespace(stops=stops), _log_name="ann",
        queue_settings=lambda: FracnbQueue(display_timezone="Europe/Berlin"),
        log=SimpleNamespace(warning=lambda *args: lines.append(args[0] % args[1:])),
    )  # fmt: skip
    pod = evicted_pod("WorkloadEvictedDueToPreempted", PREEMPTED)
    note_stop(host, pod)
    note_stop(host, pod)  # the next poll, while the pod still terminates
    notice = stops.of_server("ann", "")
    assert notice.stopped_at == T0
    assert notice.details["text"] == (
        "Your server stopped at 15:00 CET, preempted by a higher-priority job of team-b; nothing was saved. "
        "Files in your home are kept; starting it again waits in Kueue's queue for a GPU."
    )
    assert lines == ["fracnb: Kueue stopped ann: preempted by a higher-priority job of team-b; nothing was saved"]
    note_stop(host, running("ann"))
    assert stops.of_server("ann", "") is notice


def test_kueues_headline_carries_the_estimate_as_the_builtin_queues_does():
    headline = "Waiting in the GPU queue: next in line; waiting for 0.25 GPU of team-a's quota."
    release = Release(T0 + timedelta(minutes=12), Reason.IDLE, "0.25")
    assert kueue_message(headline, release, T0, ZoneInfo("Europe/Berlin")) == (
        f"{headline} Estimated start about 15:12 CET, in 12 min: an idle 0.25 GPU server is due to be stopped then. "
        "Stop the server to leave the queue."
    )
    assert kueue_message(headline, None, T0) == (
        f"{headline} No estimate yet: no server holding this quota is due to stop. Stop the server to leave the queue."
    )


async def test_a_callable_profile_lists_choice_kueue_cannot_count_is_refused_at_spawn(make_spawner):
    def profiles(spawner):
        return [{"display_name": "Other", "slug": "other", "gpu": {"fraction": 0.25, "backend": "dra"}}]

    config = Config()
    config.FracnbQueue.engine = "kueue"
    config.FractionalSpawner.profile_list = profiles
    spawner = make_spawner(config, {"profile": "other"})
    with pytest.raises(HubConfigError, match="cannot count DRA claims") as caught:
        await spawner.load_user_options()
    assert "profile 'other'" in str(caught.value)


def test_a_user_without_a_local_queue_is_told_why_kueue_never_admits():
    text = kueue.missing_local_queue_text("fracnb-ann", "jhub")
    assert text.startswith("Waiting in the GPU queue: Kueue has no LocalQueue fracnb-ann in jhub for you")
    assert "ask your hub's admin" in text
