"""The fracnb service killed (SIGKILL) and started again by the hub while a server is warned under
demand-aware timeouts, and again in the middle of culling it; then the session database (PostgreSQL)
away for a minute; then a GPU node leaving the cluster.

- An idle 0.25 GPU server (carol) has a shorter idle timeout while someone waits for its kind of slot
  (ann, queued behind filler jobs). Its deadline, announced to the notebook while it is warned, is the
  same after the restart; it is not culled before it, and culled once; ann then gets the slot in turn.
  A server in use (eve, whose activity reaches the hub every few seconds) is neither warned nor culled.
- While PostgreSQL is stopped, ann's meter keeps reporting her session, her server stops (its last
  report is sent once), the spawn form renders without advice and the service answers; once the
  database is back, every report is stored, the last one included, and counted once.
- When the node under a server disappears, the hub sees the server stopped, deletes its pod, frees
  its quota and slot, and the spawn form tells the user why.
"""

from __future__ import annotations

import re
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from fracnb_spawner.culling import parse_timestamp
from fracnb_spawner.history.db import close, open_database
from fracnb_spawner.history.store import store_report
from fracnb_testbed.handle import Testbed
from fracnb_testbed.postgres import PostgresServer, running_postgres
from fracnb_testbed.procs import wait_until
from tests.history.records import GIB, report

from .stack import GPU_NODE, FaultStack, fault_stack

CULL_CONFIG = """
c.FractionalSpawner.profile_list = [
    {"display_name": "CPU only", "slug": "cpu", "default": True},
    {"display_name": "0.25 GPU", "slug": "quarter", "gpu": {"fraction": 0.25},
     "cull": {"idle_timeout_under_demand": 30}},
    {"display_name": "Small GPU memory", "slug": "small", "gpu": {"fraction": 0.25, "memory": "10Gi"}},
]
c.FracnbService.activity_report_lag = 5
c.JupyterHub.activity_resolution = 1
# The meter reports its session every 3 s rather than every minute.
c.Spawner.args = ["--allow-root", "--FracnbMeter.session_report_interval=3"]
"""
TIMING = {"idle_timeout": 60, "warning_lead": 20, "cull_every": 2}
ADVICE = "data-fracnb-advice"
KEPT = "Keeping 'ann''s session report until the session database answers"


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with running_postgres() as server:
        yield server


@pytest.fixture(scope="module")
def stack(
    faults_testbed: Testbed, tmp_path_factory: pytest.TempPathFactory, postgres: PostgresServer
) -> Iterator[FaultStack]:
    extra = f"{CULL_CONFIG}\nc.FracnbService.db_url = {postgres.url!r}\n"
    with fault_stack(faults_testbed, tmp_path_factory.mktemp("service"), extra=extra, **TIMING) as running:
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


# ---- the session database away ---------------------------------------------------------------------


def seed_history(url: str, user: str) -> None:
    """Three past sessions of ``user`` on 0.25 GPU that used 4 GiB at most: the form advises a smaller share."""
    factory = open_database(url)
    try:
        for days_ago in (3, 2, 1):  # within the service's retention (session_retention_days) whatever the date
            started, ended = (
                (datetime.now(timezone.utc) - timedelta(days=days_ago, hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")
                for hours in (1, 0)
            )
            sent = report(secrets.token_hex(16), started=started, reported=ended, ended=ended, profile="quarter",
                          choice=None, fraction=0.25, budget_bytes=20 * GIB, peak_bytes=4 * GIB)  # fmt: skip
            store_report(factory, user, sent)
    finally:
        close(factory)


def sessions_of(stack: FaultStack, token: str, user: str) -> list[dict]:
    return stack.call(f"services/fracnb/api/users/{user}/sessions", token=token)["sessions"]


def allocated_and_observed(stack: FaultStack, token: str, user: str) -> tuple[float, float]:
    """The service's quarter GPU-hours counter and the user's stored observed seconds, read with no store
    between them (read again until two readings agree)."""

    def read() -> tuple[float, float]:
        text = stack.text("services/fracnb/metrics", token)
        found = re.search(r'^fracnb_gpu_hours_allocated_total\{profile="quarter"\} (\S+)$', text, re.MULTILINE)
        return (float(found.group(1)) if found else 0.0), sum(
            r["observed_seconds"] for r in sessions_of(stack, token, user)
        )

    last = read()
    while (now := read()) != last:
        last = now
    return now


def test_session_database_away_for_a_minute(stack: FaultStack, postgres: PostgresServer) -> None:
    seed_history(postgres.url, "bob")
    assert ADVICE in stack.page("hub/spawn/bob")
    admin = stack.user_token("admin")
    earlier = {r["session_id"] for r in sessions_of(stack, admin, "ann")}  # ann's servers of earlier tests

    def this_session() -> dict | None:
        return next((r for r in sessions_of(stack, admin, "ann") if r["session_id"] not in earlier), None)

    stack.start("ann")
    stack.wait_ready("ann")
    done = threading.Event()
    keep_active(stack, "ann", done)
    try:
        wait_until(lambda: this_session() is not None, what="ann's session reported", timeout=60, interval=1)
        counted_before, observed_before = allocated_and_observed(stack, admin, "ann")
        postgres.stop()
        away_since = time.monotonic()
        # The form renders, without advice, and the service answers.
        page = stack.page("hub/spawn/bob")
        assert "data-fracnb-profile" in page
        assert ADVICE not in page
        assert stack.request("services/fracnb/api/me", token=stack.user_token("ann"))[0] == 200
        kept = stack.hub_log().count(KEPT)
        wait_until(lambda: stack.hub_log().count(KEPT) > kept, what="a report kept", timeout=30)
        # Held down for a minute (the fault itself); ann's server stops in the middle of it.
        wait_until(lambda: time.monotonic() - away_since > 30, what="half the outage", timeout=60)
        assert stack.stop("ann") in (202, 204)
        stack.wait_stopped("ann")
        wait_until(lambda: time.monotonic() - away_since > 60, what="the outage", timeout=60)
        assert stack.service_pid() is not None
    finally:
        done.set()
        if not postgres_running(postgres):
            postgres.start()

    wait_until(lambda: (this_session() or {}).get("ended_at") is not None, what="ann's last report stored",
               timeout=60, interval=1)  # fmt: skip
    counted_after, observed_after = allocated_and_observed(stack, admin, "ann")
    assert observed_after > observed_before + 20  # the reports made while the database was away
    assert counted_after - counted_before == pytest.approx(0.25 * (observed_after - observed_before) / 3600)
    assert ADVICE in stack.page("hub/spawn/bob")
    stack.assert_invariants()


def postgres_running(server: PostgresServer) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", server.port)) == 0


# ---- a GPU node leaves the cluster ---------------------------------------------------------------


def test_gpu_node_disappears(stack: FaultStack) -> None:
    stack.start("fay")
    stack.wait_ready("fay")
    node = stack.testbed.get(f"/api/v1/nodes/{GPU_NODE}")
    pod = stack.pod_of("fay")
    assert pod["spec"]["nodeName"] == GPU_NODE
    stack.testbed.delete_node(GPU_NODE)
    try:
        # The hub sees the server stopped, and deletes its pod.
        stack.wait_stopped("fay", timeout=60)
        wait_until(lambda: stack.pod_of("fay") is None, what="fay's pod deleted", timeout=30)
        form = stack.page("hub/spawn/fay")
        assert f"the node it ran on ({GPU_NODE}) left the cluster" in form
        assert "Your GPU quota: 0 of" in form
        stack.assert_invariants()
    finally:
        stack.testbed.create_node(node)
    stack.start("fay")
    stack.wait_ready("fay")
    assert stack.stop("fay") in (202, 204)
    stack.wait_stopped("fay")
    stack.assert_invariants()
