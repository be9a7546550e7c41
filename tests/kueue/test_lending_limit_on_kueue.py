"""The form's borrowable quota against the real Kueue v0.17 under a peer's ``lendingLimit``: team b lends only a
quarter of its idle GPU, team c borrows that quarter, and team a, with its own quarter used, finds nothing to
borrow, as :func:`fracnb_spawner.queue.kueue.quota.team_quota` says (before lendingLimit was read it said 0.75)."""

from __future__ import annotations

from fracnb_spawner.queue.kueue.quota import team_quota
from fracnb_testbed.procs import wait_until
from tests.kueue.objects import API, cluster_queue, condition, create, flavor, gates, gpu_pod, local_queue, workload_of


def pod(testbed, namespace, name):
    status, answer = testbed._call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    return answer if status == 200 else None


def admitted(testbed, namespace, name) -> bool:
    return bool(pod(testbed, namespace, name)) and not gates(pod(testbed, namespace, name))


def quota_of(testbed, namespace, team):
    """``team``'s quota from the ClusterQueues of the test's cohort, as Kueue's status has them now."""
    queues = [q for q in testbed.get(f"{API}/clusterqueues")["items"] if q["spec"].get("cohortName") == namespace]
    return team_quota(queues, f"{namespace}-{team}")


def test_a_peers_kept_quota_is_not_borrowable_and_kueue_agrees(kueue_testbed, kueue_namespace):
    testbed, ns = kueue_testbed, kueue_namespace
    name = f"{ns}-flavor"
    create(testbed, flavor(name))
    lending = cluster_queue(f"{ns}-b", name, ns, 1000)
    lending["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["lendingLimit"] = "250"
    for queue in (cluster_queue(f"{ns}-a", name, ns, 250), lending, cluster_queue(f"{ns}-c", name, ns, 250)):
        create(testbed, queue)
    for team in "abc":
        create(testbed, local_queue(ns, team, f"{ns}-{team}"))
    for made, queue in (("a-1", "a"), ("c-1", "c"), ("c-2", "c")):
        testbed.create_pod(ns, gpu_pod(made, queue))
        wait_until(lambda made=made: admitted(testbed, ns, made), what=f"{made} admitted", timeout=60)
    wait_until(lambda: (q := quota_of(testbed, ns, "c")) and q.used == 500, what="c's usage in its status", timeout=30)
    assert quota_of(testbed, ns, "a").borrowable == 0
    testbed.create_pod(ns, gpu_pod("a-2", "a"))
    reserved = wait_until(lambda: condition(workload_of(testbed, ns, pod(testbed, ns, "a-2")), "QuotaReserved"),
                          what="a-2's Workload status", timeout=30)  # fmt: skip
    assert reserved["status"] == "False", reserved
    assert "insufficient unused quota" in reserved["message"]
    # c gives back its borrowed quarter: a may borrow it, and Kueue admits a-2 on it.
    testbed.delete_pod(ns, "c-2", grace_seconds=0)
    wait_until(lambda: admitted(testbed, ns, "a-2"), what="a-2 admitted on the quarter c gave back", timeout=60)
    wait_until(lambda: quota_of(testbed, ns, "a").borrowed == 250, what="a's borrowing in its status", timeout=30)
