"""A spawn waiting for Kueue across a hub restart (SIGKILL to the hub, its proxy and the fracnb service, as a
hub pod dies; tests/faults/stack.py): the fracnb service resumes it, the resumed spawn takes over the pod
rather than replacing it, so the pod's Workload, and with it the place in Kueue's queue, stays; when the
quota frees, the kept pod starts a real server that the restarted hub accepts (it keeps its token)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fracnb_testbed.handle import Testbed
from fracnb_testbed.procs import wait_until
from tests.faults.stack import FaultStack, fault_stack
from tests.kueue.objects import gates, gpu_pod, workload_of
from tests.kueue.spawns import one_quarter_team

ADMISSION_GATE = "kueue.x-k8s.io/admission"


@pytest.fixture
def stack(kueue_testbed: Testbed, tmp_path) -> Iterator[FaultStack]:
    visibility = f"https://127.0.0.1:{kueue_testbed.state.ports['kueue-visibility']}"
    config = f"c.FracnbQueue.engine = 'kueue'\nc.FracnbQueue.kueue_visibility_url = {visibility!r}"
    with fault_stack(kueue_testbed, tmp_path, extra=config) as running:
        yield running


def team_on_local_nodes(testbed: Testbed, namespace: str) -> None:
    """A team with quota for one quarter GPU whose flavor lets the hub's pods on the local (real) nodes."""
    one_quarter_team(testbed, namespace, ["ann", "bob"], node_labels={"nvidia.com/gpu.replicas": "4"})


def test_a_spawn_waiting_for_kueue_keeps_its_pod_and_place_across_a_hub_restart(stack: FaultStack) -> None:
    testbed, ns = stack.testbed, stack.namespace
    team_on_local_nodes(testbed, ns)
    # A batch job of the team holds its quota (same priority: the notebook does not preempt it).
    filler = gpu_pod("batch-job", "fracnb-ann", priority_class="fracnb-notebook")
    testbed.create_pod(ns, filler)
    stack.start("bob")
    wait_until(
        lambda: ADMISSION_GATE in gates(stack.pod_of("bob")) and workload_of(testbed, ns, stack.pod_of("bob")),
        what="bob's pod waiting for Kueue with its Workload",
        timeout=60,
        interval=0.5,
    )
    before, workload = stack.pod_of("bob"), workload_of(testbed, ns, stack.pod_of("bob"))
    stack.kill_hub()
    stack.start_hub()
    wait_until(
        lambda: "resumes its place in Kueue's queue with its pod kept" in stack.hub_log(),
        what="the fracnb service to resume bob's spawn, which takes over his pod",
        timeout=90,
        interval=1,
    )
    assert (stack.server("bob") or {}).get("pending") == "spawn"
    after = stack.pod_of("bob")
    assert after["metadata"]["uid"] == before["metadata"]["uid"], "the pod was replaced"
    assert ADMISSION_GATE in gates(after)
    kept = workload_of(testbed, ns, after)
    assert (kept["metadata"]["name"], kept["metadata"]["creationTimestamp"]) == (
        workload["metadata"]["name"],
        workload["metadata"]["creationTimestamp"],
    )
    testbed.delete_pod(ns, "batch-job", grace_seconds=0)
    stack.wait_ready("bob", timeout=180)
    assert stack.pod_of("bob")["metadata"]["uid"] == before["metadata"]["uid"]
    assert stack.stop("bob") < 300
    stack.wait_stopped("bob")
