"""kube-apiserver restarted with etcd kept, while a server runs, one waits in the GPU queue and the spawn
form is open: once quickly, and once held down longer than any watch's retry window (KubeSpawner's pod
reflector gives up after about 50 s). Afterwards every watch resumes (KubeSpawner's pod reflector
included), the form's free counts are right again, the queued server starts when a slot frees and the
hub sees it ready, a new start works, and nothing is counted twice."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from fracnb_testbed.controlplane import start_component, stop_component
from fracnb_testbed.handle import Testbed
from fracnb_testbed.procs import wait_until

from .stack import FaultStack, fault_stack

GAVE_UP = "Watching resources never recovered, giving up"


@pytest.fixture(scope="module")
def stack(faults_testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    with fault_stack(faults_testbed, tmp_path_factory.mktemp("apiserver")) as running:
        yield running


def free_now(stack: FaultStack, user: str) -> int | None:
    """The spawn form's free count for a 0.25 GPU, as ``user`` (without a server) sees it."""
    row = re.search(r'data-fracnb-profile="quarter".*?(\d+) free now', stack.page(f"hub/spawn/{user}"), re.DOTALL)
    return int(row.group(1)) if row else None


def restart_apiserver(stack: FaultStack, *, beyond_retries: bool) -> None:
    log_length = len(stack.hub_log())
    state_dir = stack.testbed.state.directory
    # kube-apiserver answers nothing from its SIGTERM on, but its process waits up to 60 s for open watches
    # to end (its serving shutdown timeout); etcd keeps the data, so a kill after 5 s is the same restart.
    stopped = stop_component(state_dir, "kube-apiserver", grace=5)
    if beyond_retries:
        # Down until KubeSpawner's pod reflector has given up its own retries.
        wait_until(lambda: GAVE_UP in stack.hub_log()[log_length:], what="the pod reflector to give up", timeout=120)
    start_component(state_dir, stopped)


def queue(stack: FaultStack, user: str) -> None:
    stack.start(user)
    wait_until(lambda: stack.gated(user), what=f"{user} queued", timeout=60, interval=0.5)


def test_apiserver_restarted_quickly_then_held_down(stack: FaultStack) -> None:
    fillers = stack.fill(3 - stack.slots_in_use())
    stack.start("carol")
    stack.wait_ready("carol")
    queue(stack, "ann")
    assert free_now(stack, "dan") is None  # none free: the form shows the queue instead

    restart_apiserver(stack, beyond_retries=False)
    # The queued server starts when a slot frees, and the hub sees it running; a new start works.
    stack.free(fillers[0])
    stack.wait_ready("ann")
    stack.start("eve", profile="cpu")
    stack.wait_ready("eve")

    queue(stack, "bob")
    restart_apiserver(stack, beyond_retries=True)
    # Every watch resumed, KubeSpawner's pod reflector included: the same again.
    stack.free(fillers[1])
    stack.wait_ready("bob")
    stack.start("fay", profile="cpu")
    stack.wait_ready("fay")
    assert "watching again" in stack.hub_log()
    # The form counts right again: one slot frees when carol stops.
    assert stack.stop("carol") in (202, 204)
    stack.wait_stopped("carol")
    try:
        wait_until(lambda: free_now(stack, "dan") == 1, what="the form's free count", timeout=30, interval=1)
    except Exception:
        html = stack.page("hub/spawn/dan")
        raise AssertionError(html[html.index('data-fracnb-profile="quarter"') :][:3000]) from None
    stack.assert_invariants()
    for user in ("ann", "bob", "eve", "fay"):
        assert stack.stop(user) in (202, 204)
    for user in ("ann", "bob", "eve", "fay"):
        stack.wait_stopped(user)
    stack.free(fillers[2])
    stack.assert_invariants()
