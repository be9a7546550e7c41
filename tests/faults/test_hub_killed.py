"""The hub killed (SIGKILL, with its proxy and the fracnb service, as a hub pod dies) and started again:
with spawns queued for a full GPU, mid-spawn before and after the pod exists, and mid-stop.

Afterwards: no pod without a server nor a server without its pod, no gated pod nobody waits on, the
hub's quota count equal to what the pods hold, and the queue in its order. Queued spawns resume by
themselves (the fracnb service starts them again) and their progress page comes back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect

from fracnb_spawner.common.podkeys import QUEUED_AT_ANNOTATION
from fracnb_testbed.handle import Testbed
from fracnb_testbed.procs import wait_until
from tests.e2e.pages import log_in

from .stack import FaultStack, fault_stack

QUEUE_CONFIG = "\n".join([
    "c.FracnbQueue.user_priorities = {'dan': 10}",
    "c.FracnbService.cull_every = 600",  # nothing is culled here
])  # fmt: skip


@pytest.fixture(scope="module")
def stack(faults_testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    with fault_stack(faults_testbed, tmp_path_factory.mktemp("hub-killed"), extra=QUEUE_CONFIG) as running:
        yield running


def queued_at(stack: FaultStack, user: str) -> str | None:
    """The enqueue time on ``user``'s pod; None while it has none (a resumed spawn replaces the pod)."""
    pod = stack.pod_of(user) or {}
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(QUEUED_AT_ANNOTATION)


def pod_uid(stack: FaultStack, user: str) -> str | None:
    return ((stack.pod_of(user) or {}).get("metadata") or {}).get("uid")


def replaced_and_gated(stack: FaultStack, user: str, old_uid: str | None) -> bool:
    """``user``'s pod is a new one (not the pod from before the restart, which a resumed spawn deletes) and gated."""
    return pod_uid(stack, user) not in (None, old_uid) and stack.gated(user)


def pending_spawn(stack: FaultStack, user: str) -> bool:
    return (stack.server(user) or {}).get("pending") == "spawn"


def test_queued_spawns_resume_by_themselves_in_order(stack: FaultStack, browser: Browser) -> None:
    fillers = stack.fill(3 - stack.slots_in_use())
    stack.start("carol")
    stack.wait_ready("carol")
    # ann, then bob, then dan, who has a higher priority: the order is dan, ann, bob.
    for user in ("ann", "bob", "dan"):
        stack.start(user)
        wait_until(lambda u=user: stack.gated(u), what=f"{user} queued", timeout=60, interval=0.5)
    places = {user: queued_at(stack, user) for user in ("ann", "bob", "dan")}
    context = browser.new_context()
    page = context.new_page()
    try:
        log_in(page, stack.demo, "ann")
        page.goto(f"{stack.url}/hub/spawn-pending/ann")
        headline = page.locator("#progress-message")
        expect(headline).to_contain_text("Queued for a 0.25 GPU (time-slicing): 2nd in line", timeout=60_000)

        uids = {user: pod_uid(stack, user) for user in places}
        stack.kill_hub()
        page.evaluate("document.getElementById('progress-message').textContent = ''")
        stack.start_hub()
        # No click: the service starts each forgotten spawn again, and it takes over its pod's place.
        # A resumed spawn replaces its gated pod: wait for the new pods before reading their places.
        wait_until(
            lambda: all(pending_spawn(stack, u) and replaced_and_gated(stack, u, uids[u]) for u in places),
            what="the queued spawns resumed, each with a new gated pod",
            timeout=60,
        )
        assert {user: queued_at(stack, user) for user in places} == places
        # ann's progress page came back by itself, with her place.
        expect(headline).to_contain_text("Queued for a 0.25 GPU (time-slicing): 2nd in line", timeout=60_000)
    finally:
        context.close()
    # eve arrives after the restart: she queues behind the three.
    stack.start("eve")
    wait_until(lambda: stack.gated("eve"), what="eve queued", timeout=60, interval=0.5)
    # Each freed slot goes to the next in the order from before the restart, eve last.
    frees = [lambda name=name: stack.free(name) for name in fillers] + [lambda: stack.stop("carol")]
    order = ["dan", "ann", "bob", "eve"]
    for index, (free, user) in enumerate(zip(frees, order, strict=True)):
        free()
        stack.wait_ready(user)
        for later in order[index + 1 :]:
            assert stack.gated(later), f"{later} started before {user}"
    for user in order:
        assert stack.stop(user) in (202, 204)
    for user in [*order, "carol"]:
        stack.wait_stopped(user)
    stack.assert_invariants()


def test_killed_before_the_pod_exists(stack: FaultStack) -> None:
    stack.hold("fay", "before")
    stack.start("fay")  # the hub answers after 1 s; the spawn goes on
    wait_until(lambda: stack.reached_hold("fay", "before"), what="fay's spawn before its pod", timeout=60)
    stack.kill_hub()
    stack.release("fay", "before")
    stack.start_hub()
    # The spawn is gone with the hub; nothing of it is left, and fay can start again.
    stack.wait_stopped("fay")
    assert stack.pod_of("fay") is None
    stack.assert_invariants()
    stack.start("fay")
    stack.wait_ready("fay")
    assert stack.stop("fay") in (202, 204)
    stack.wait_stopped("fay")
    stack.assert_invariants()


def test_killed_after_the_pod_exists(stack: FaultStack) -> None:
    stack.hold("fay", "after")
    stack.start("fay")  # the hub answers after 1 s; the spawn goes on
    wait_until(lambda: stack.reached_hold("fay", "after"), what="fay's pod created", timeout=60)
    assert stack.pod_of("fay") is not None
    stack.kill_hub()
    stack.release("fay", "after")
    stack.start_hub()
    # The restarted hub finds the pod running and keeps the server.
    stack.wait_ready("fay")
    stack.assert_invariants()
    assert stack.stop("fay") in (202, 204)
    stack.wait_stopped("fay")
    stack.assert_invariants()


def test_killed_mid_stop(stack: FaultStack) -> None:
    stack.start("fay")
    stack.wait_ready("fay")
    name = stack.pod_of("fay")["metadata"]["name"]
    # A finalizer holds the pod (as a slow kubelet would): the hub's stop waits for it to go.
    patch = {"metadata": {"finalizers": ["fracnb.test/hold"]}}
    stack.testbed.patch_pod(stack.namespace, name, patch)
    stack.request("hub/api/users/fay/server", method="DELETE")
    wait_until(lambda: (stack.server("fay") or {}).get("pending") == "stop", what="fay's stop under way", timeout=30)
    stack.kill_hub()
    stack.start_hub()
    # The restarted hub sees the pod on its way out: the server is stopped, not waited on.
    stack.wait_stopped("fay", timeout=30)
    stack.testbed.patch_pod(stack.namespace, name, {"metadata": {"finalizers": None}})
    wait_until(lambda: not any(p["metadata"]["name"] == name for p in stack.testbed.list_pods(stack.namespace)),
               what="fay's pod gone", timeout=30)  # fmt: skip
    stack.assert_invariants()
