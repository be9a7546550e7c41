"""The fracnb service killed (SIGKILL) and started again by the hub while a server is warned under
demand-aware timeouts, and again in the middle of culling it.

An idle 0.25 GPU server (carol) has a shorter idle timeout while someone waits for its kind of slot
(ann, queued behind filler jobs). Its deadline, announced to the notebook while it is warned, is the
same after the restart; it is not culled before it, and culled once; ann then gets the slot in turn.
A server in use (eve, whose activity reaches the hub every few seconds) is neither warned nor culled."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest

from fracnb_spawner.culling import parse_timestamp
from fracnb_testbed.handle import Testbed
from fracnb_testbed.procs import wait_until

from .stack import FaultStack, fault_stack

CULL_CONFIG = """
c.FractionalSpawner.profile_list = [
    {"display_name": "CPU only", "slug": "cpu", "default": True},
    {"display_name": "0.25 GPU", "slug": "quarter", "gpu": {"fraction": 0.25},
     "cull": {"idle_timeout_under_demand": 30}},
]
c.FracnbService.activity_report_lag = 5
c.JupyterHub.activity_resolution = 1
"""
TIMING = {"idle_timeout": 60, "warning_lead": 20, "cull_every": 2}


@pytest.fixture(scope="module")
def stack(faults_testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    with fault_stack(faults_testbed, tmp_path_factory.mktemp("service"), extra=CULL_CONFIG, **TIMING) as running:
        yield running


def deadline(stack: FaultStack, token: str) -> dict | None:
    """The default server's cull deadline as the service tells the notebook."""
    return (stack.call("services/fracnb/api/me", token=token)["culling"].get("") or {}).get("deadline")


def keep_active(stack: FaultStack, user: str, stop: threading.Event) -> threading.Thread:
    """Report activity of ``user``'s server every 2 s, as its notebook does while in use."""

    def report() -> None:
        while not stop.wait(2):
            now = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
            body = {"last_activity": now, "servers": {"": {"last_activity": now}}}
            stack.request(f"hub/api/users/{user}/activity", method="POST", body=body)

    thread = threading.Thread(target=report, daemon=True)
    thread.start()
    return thread


def test_service_killed_while_warned_and_mid_cull(stack: FaultStack) -> None:
    fillers = stack.fill(3 - stack.slots_in_use())
    stack.start("eve", profile="cpu")
    stack.start("carol")
    for user in ("eve", "carol"):
        stack.wait_ready(user)
    done = threading.Event()
    keep_active(stack, "eve", done)
    try:
        carol, eve = stack.user_token("carol"), stack.user_token("eve")
        pod = stack.pod_of("carol")["metadata"]["name"]
        # A finalizer holds carol's pod when it is deleted (as a slow kubelet would): the cull takes a while.
        stack.testbed.patch_pod(stack.namespace, pod, {"metadata": {"finalizers": ["fracnb.test/hold"]}})
        stack.start("ann")
        wait_until(lambda: stack.gated("ann"), what="ann queued", timeout=60, interval=0.5)
        wait_until(lambda: (deadline(stack, carol) or {}).get("warning"), what="carol warned", timeout=90, interval=1)
        announced = deadline(stack, carol)
        assert announced["reason"] == "demand"

        killed = stack.kill_service()
        stack.wait_service_back(killed)
        assert deadline(stack, carol)["cull_at"] == announced["cull_at"]  # warned once, with one time

        wait_until(lambda: (stack.server("carol") or {}).get("pending") == "stop", what="carol's cull", timeout=90,
                   interval=0.2)  # fmt: skip
        assert datetime.now(timezone.utc) >= parse_timestamp(announced["cull_at"])
        killed = stack.kill_service()  # in the middle of the cull
        stack.testbed.patch_pod(stack.namespace, pod, {"metadata": {"finalizers": None}})
        stack.wait_stopped("carol")
        stack.wait_service_back(killed)
        stack.wait_ready("ann")  # carol's slot, to the one waiting for it
        assert stack.hub_log().count(f"Deleting pod {stack.namespace}/{pod}") == 1  # culled once

        assert (stack.server("eve") or {}).get("ready")
        assert not (deadline(stack, eve) or {}).get("warning")
    finally:
        done.set()
    for user in ("ann", "eve"):
        assert stack.stop(user) in (202, 204)
    for user in ("ann", "eve"):
        stack.wait_stopped(user)
    for name in fillers:
        stack.free(name)
    stack.assert_invariants()
