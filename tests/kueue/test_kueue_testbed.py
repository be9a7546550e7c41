"""Kueue v0.17 on the testbed, with plain pods: team quotas and borrowing between teams, reclaim by
preemption, the objects of helm-values/kueue/, and Kueue down."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import yaml

from fracnb_testbed import kueue
from fracnb_testbed.procs import wait_until
from tests.kueue.objects import (
    API,
    cluster_queue,
    condition,
    create,
    flavor,
    gates,
    gpu_pod,
    local_queue,
    workload_of,
)

HELM_KUEUE = Path(__file__).resolve().parents[2] / "helm-values" / "kueue" / "queues.yaml"
ADMISSION_GATE = "kueue.x-k8s.io/admission"


def pod(testbed, namespace, name):
    status, answer = testbed._call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    return answer if status == 200 else None


def running(testbed, namespace, name):
    current = pod(testbed, namespace, name)
    return current is not None and not gates(current) and current["spec"].get("nodeName")


def deleted_or_gone(testbed, namespace, name):
    current = pod(testbed, namespace, name)
    return current is None or bool(current["metadata"].get("deletionTimestamp"))


def preemption_message(testbed, namespace, workload_name):
    """The message of Kueue's ``Preempted`` event on a Workload, None before there is one."""
    selector = f"involvedObject.name%3D{workload_name}"
    events = testbed.get(f"/api/v1/namespaces/{namespace}/events?fieldSelector={selector}")["items"]
    return next((event["message"] for event in events if event.get("reason") == "Preempted"), None)


def two_teams(testbed, namespace):
    """Cohort <ns>: team a (0.25 GPU, may borrow 0.25) and team b (0.25 GPU); LocalQueues a and b."""
    name = f"{namespace}-flavor"
    create(testbed, flavor(name))
    create(testbed, cluster_queue(f"{namespace}-a", name, namespace, 250, borrow=250))
    create(testbed, cluster_queue(f"{namespace}-b", name, namespace, 250))
    create(testbed, local_queue(namespace, "a", f"{namespace}-a"))
    create(testbed, local_queue(namespace, "b", f"{namespace}-b"))


def test_a_team_borrows_an_idle_teams_quota_and_gives_it_back_when_that_team_asks(kueue_testbed, kueue_namespace):
    testbed, ns = kueue_testbed, kueue_namespace
    two_teams(testbed, ns)
    testbed.create_pod(ns, gpu_pod("a-1", "a"))
    wait_until(lambda: running(testbed, ns, "a-1"), what="a-1 admitted in team a's quota", timeout=60)
    testbed.create_pod(ns, gpu_pod("a-2", "a"))
    wait_until(lambda: running(testbed, ns, "a-2"), what="a-2 admitted on quota borrowed from team b", timeout=60)
    admitted = {name: pod(testbed, ns, name) for name in ("a-1", "a-2")}
    assert admitted["a-2"]["spec"]["nodeSelector"]["nvidia.com/gpu.replicas"] == "4"  # the flavor's node labels
    workloads = {name: workload_of(testbed, ns, found) for name, found in admitted.items()}
    testbed.create_pod(ns, gpu_pod("a-3", "a"))
    testbed.create_pod(ns, gpu_pod("b-1", "b"))
    # b reclaims its lent quota: one of team a's two pods is preempted (deleted), b-1 starts.
    wait_until(lambda: running(testbed, ns, "b-1"), what="b-1 admitted by reclaiming team b's quota", timeout=60)
    wait_until(
        lambda: [name for name in admitted if deleted_or_gone(testbed, ns, name)],
        what="one of team a's pods preempted: its pod deleted",
        timeout=60,
    )
    (victim,) = [name for name in admitted if deleted_or_gone(testbed, ns, name)]
    (survivor,) = set(admitted) - {victim}
    assert running(testbed, ns, survivor)
    # The victim's Workload goes with its pod (the garbage collector), often before it can be read: Kueue's
    # event on it, which outlives it, carries the same message as its Preempted condition.
    message = wait_until(
        lambda: preemption_message(testbed, ns, workloads[victim]["metadata"]["name"]),
        what="Kueue's Preempted event on the victim's Workload",
        timeout=30,
    )
    assert "due to reclamation within the cohort;" in message  # InCohortReclamation (preemption.go, v0.17.0)
    waiting = pod(testbed, ns, "a-3")
    assert ADMISSION_GATE in gates(waiting)
    reserved = wait_until(
        lambda: condition(workload_of(testbed, ns, waiting), "QuotaReserved"), what="a-3's Workload status", timeout=30
    )
    assert reserved["status"] == "False"
    assert "insufficient unused quota" in reserved["message"]


def test_the_objects_of_helm_values_kueue_are_accepted(kueue_testbed):
    testbed = kueue_testbed
    documents = [doc for doc in yaml.safe_load_all(HELM_KUEUE.read_text()) if doc]
    suffix = uuid.uuid4().hex[:6]
    for namespace in {doc["metadata"].get("namespace") for doc in documents} - {None}:
        testbed.create_namespace(f"{namespace}-{suffix}")
    renamed = {doc["metadata"]["name"]: f"{doc['metadata']['name']}-{suffix}" for doc in documents}
    for doc in documents:
        # Unique names: the cluster is shared by the session's tests. References follow the renames.
        text = yaml.safe_dump(doc)
        for old, new in sorted(renamed.items(), key=lambda item: -len(item[0])):
            text = text.replace(f": {old}\n", f": {new}\n")
        manifest = yaml.safe_load(text)
        if "namespace" in doc["metadata"]:
            manifest["metadata"]["namespace"] = f"{doc['metadata']['namespace']}-{suffix}"
        create(testbed, manifest)
    queues = testbed.get(f"{API}/clusterqueues")["items"]
    mine = [q for q in queues if q["metadata"]["name"].endswith(suffix)]
    assert {q["spec"]["cohortName"] for q in mine} == {f"university-{suffix}"}
    active = wait_until(
        lambda: (
            all(condition(testbed.get(f"{API}/clusterqueues/{q['metadata']['name']}"), "Active") for q in mine)
            and [testbed.get(f"{API}/clusterqueues/{q['metadata']['name']}") for q in mine]
        ),
        what="the ClusterQueues' status",
        timeout=30,
    )
    assert all(condition(q, "Active")["status"] == "True" for q in active)


def test_with_kueue_down_cpu_pods_start_and_queued_pods_are_refused_at_once(kueue_testbed, kueue_namespace):
    testbed, ns = kueue_testbed, kueue_namespace
    two_teams(testbed, ns)
    kueue.stop_manager(testbed.state.directory)
    try:
        testbed.create_pod(ns, gpu_pod("cpu-only", None, slots=0))  # no queue label: the webhooks let it by
        started = time.monotonic()
        status, answer = testbed._call("POST", f"/api/v1/namespaces/{ns}/pods", gpu_pod("queued", "a"))
        refused_after = time.monotonic() - started
    finally:
        kueue.restart_manager(testbed.state.directory)
    assert status == 500, answer
    assert "mpod.kb.io" in str(answer)
    assert refused_after < 10
    assert pod(testbed, ns, "queued") is None
    wait_until(lambda: running(testbed, ns, "cpu-only"), what="the CPU-only pod placed", timeout=60)


def test_a_deleted_running_pods_quota_goes_to_the_next_in_line(kueue_testbed, kueue_namespace):
    """Kueue v0.17 frees it only when the garbage collector deletes the pod's Workload."""
    testbed, ns = kueue_testbed, kueue_namespace
    create(testbed, flavor(f"{ns}-flavor"))
    create(testbed, cluster_queue(f"{ns}-solo", f"{ns}-flavor", f"{ns}-alone", 250))  # nobody to borrow from
    create(testbed, local_queue(ns, "b", f"{ns}-solo"))
    for index in range(2):
        testbed.create_pod(ns, gpu_pod(f"b-{index}", "b"))
    wait_until(lambda: running(testbed, ns, "b-0"), what="b-0 admitted", timeout=60)
    assert ADMISSION_GATE in gates(pod(testbed, ns, "b-1"))
    testbed.delete_pod(ns, "b-0", grace_seconds=0)
    wait_until(lambda: running(testbed, ns, "b-1"), what="b-1 admitted after b-0 went", timeout=60)
