"""Culling that answers demand, against a real JupyterHub, real single-user servers and the
testbed's apiserver holding queued pods as the hub's queue leaves them (docs/contract.md)."""

from __future__ import annotations

import secrets
from contextlib import contextmanager
from datetime import datetime, timedelta

from fracnb_meter.wording import cull_warning
from fracnb_schemas import SERVICE_REPORT, problems
from fracnb_spawner.culling import CullPolicy, isoformat, parse_timestamp
from fracnb_spawner.quota.policy import QuotaPolicy
from fracnb_spawner.service.cullpass import CullSettings, cull_pass, user_report, utcnow
from fracnb_spawner.service.hubapi import HubAPI
from fracnb_spawner.service.metrics import CullMetrics
from tests.service.calls import record_activity, user_token

SLOT = "nvidia.com-gpu.shared"
OTHER_SLOT = "nvidia.com-mig-1g.10gb.a100"
DEMAND_SENTENCE = "Someone is waiting for a GPU; this idle server stops at"


def holding_pod(testbed, namespace, user, *, idle_timeout, under_demand, slot=SLOT):
    """The pod of a running GPU server holding a slot of kind ``slot`` (stored, bound nowhere)."""
    testbed.create_pod(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"jupyter-{user}",
                "annotations": {
                    "hub.jupyter.org/username": user,
                    "hub.jupyter.org/servername": "",
                    "fracnb.io/gpu-fraction": "1/4",
                    "fracnb.io/profile": "quarter",
                    "fracnb.io/idle-timeout": str(idle_timeout),
                    "fracnb.io/idle-timeout-under-demand": str(under_demand),
                },
                "labels": {
                    "component": "singleuser-server",
                    "fracnb.io/profile": "quarter",
                    "fracnb.io/slot-kind": slot,
                },
            },
            "spec": {
                "nodeName": "fracnb-nowhere",
                "containers": [{"name": "notebook", "image": "example.invalid/notebook"}],
            },
        },
    )


@contextmanager
def waiting(testbed, namespace, *, since: datetime, slot=SLOT, priority=0, user=None, kueue=False):
    """A spawn waiting in the queue, as the hub creates it: gated, labelled, annotated; with ``kueue``, as the kueue
    engine leaves it while the team has no quota: Kueue's gate and the user's LocalQueue instead of fracnb's gate."""
    user = user or f"waiter-{secrets.token_hex(3)}"
    name = f"jupyter-{user}"
    gate = "kueue.x-k8s.io/admission" if kueue else "fracnb.io/queue"
    local_queue = {"kueue.x-k8s.io/queue-name": f"fracnb-{user}"} if kueue else {}
    testbed.create_pod(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "annotations": {
                    "hub.jupyter.org/username": user,
                    "hub.jupyter.org/servername": "",
                    "fracnb.io/gpu-fraction": "1/4",
                    "fracnb.io/profile": "quarter",
                    "fracnb.io/queued-at": isoformat(since),
                    "fracnb.io/queue-priority": str(priority),
                    "fracnb.io/max-wait": "3600",
                },
                "labels": {
                    "component": "singleuser-server",
                    "fracnb.io/profile": "quarter",
                    "fracnb.io/slot-kind": slot,
                    **local_queue,
                },
            },
            "spec": {
                "schedulingGates": [{"name": gate}],
                "containers": [{"name": "notebook", "image": "example.invalid/notebook"}],
            },
        },
    )
    try:
        yield user
    finally:
        testbed.delete_pod(namespace, name, grace_seconds=0)


def last_activity(hub, user) -> datetime:
    _, model = hub.api("GET", f"users/{user}")
    moment = parse_timestamp(model["servers"][""]["last_activity"])
    assert moment is not None
    return moment


def culling_of(hub, user) -> dict:
    status, body = hub.http("GET", hub.service_url + "api/me", token=user_token(hub, user))
    assert status == 200, body
    assert problems(SERVICE_REPORT, body, check_formats=True) == []
    return body["culling"][""]


def test_the_service_warns_an_idle_server_only_while_someone_waits(hub, new_user, testbed, hub_namespace):
    """The managed service, real clock: the hub config's warning lead is 900 s, but a GPU server's stop under
    demand saves its variables first (hibernation on), so it is warned 120 s ahead (warning_lead_hibernating):
    a timeout under demand of 100 s is within it at once."""
    user = new_user("idle")
    hub.start_server(user)
    holding_pod(testbed, hub_namespace, user, idle_timeout=3600, under_demand=100)
    try:
        check_warned_only_while_someone_waits(hub, user, testbed, hub_namespace)
    finally:
        # Leave no server that later culling passes of the session would stop for demand.
        hub.api("DELETE", f"users/{user}/server")
        testbed.delete_pod(hub_namespace, f"jupyter-{user}", grace_seconds=0)


def check_warned_only_while_someone_waits(hub, user, testbed, hub_namespace):
    calm = culling_of(hub, user)
    assert (calm["deadline"]["reason"], calm["deadline"]["warning"]) == ("idle", False)
    # A spawn for another kind of slot is no demand for this one.
    with waiting(testbed, hub_namespace, since=utcnow() - timedelta(hours=1), slot=OTHER_SLOT):
        assert culling_of(hub, user)["deadline"]["reason"] == "idle"
    with waiting(testbed, hub_namespace, since=utcnow() - timedelta(hours=1)):
        deadline = culling_of(hub, user)["deadline"]
        assert (deadline["reason"], deadline["warning"]) == ("demand", True)
        assert parse_timestamp(deadline["cull_at"]) == last_activity(hub, user) + timedelta(seconds=100)
        assert 0 < deadline["seconds_left"] <= 100
        assert (cull_warning(deadline) or "").startswith(DEMAND_SENTENCE)
    # Nobody waits any more: the usual idle timeout again.
    after = culling_of(hub, user)["deadline"]
    assert (after["reason"], after["warning"]) == ("idle", False)
    assert after["seconds_left"] > 3000


def settings():
    return CullSettings(default_policy=CullPolicy(idle_timeout=3600), warning_lead=600, page_size=1)


async def test_an_idle_server_is_culled_only_while_someone_waits_and_a_busy_one_never(
    hub, new_user, testbed, hub_namespace, pod_source
):
    idle, busy = new_user("idle"), new_user("busy")
    team = f"team-{secrets.token_hex(3)}"
    assert hub.api("POST", f"groups/{team}", {"users": [idle, busy]})[0] == 201
    hub.start_server(idle)
    hub.start_server(busy)
    for user in (idle, busy):
        holding_pod(testbed, hub_namespace, user, idle_timeout=3600, under_demand=1200)
    # 25 minutes after the idle server's last activity: past its 20 minutes under demand.
    now = last_activity(hub, idle) + timedelta(minutes=25)
    # The busy server's kernel keeps reporting: the hub heard of it 30 s ago (within the lag).
    record_activity(hub, busy, now - timedelta(seconds=30))
    api = HubAPI(hub.api_url, hub.service_token)
    metrics = CullMetrics()

    async def culled_at(moment):
        """Which of this test's servers a pass at ``moment`` stopped (the session's hub has others)."""
        report = await cull_pass(api, pod_source, settings(), metrics, clock=lambda: moment)
        return [culled for culled in report.culled if culled[0] in (idle, busy)]

    async def deadline_of(user, moment):
        report = await user_report(api, pod_source, QuotaPolicy(), settings(), user, clock=lambda: moment)
        assert problems(SERVICE_REPORT, report, check_formats=True) == []
        return report["culling"][""]["deadline"]

    try:
        # Nobody waits: nothing changes.
        assert await culled_at(now) == []
        assert (await deadline_of(idle, now))["reason"] == "idle"
        assert metrics.registry.get_sample_value("fracnb_group_allocated_gpus", {"group": team}) == 0.5
        with waiting(testbed, hub_namespace, since=now - timedelta(minutes=5), slot=OTHER_SLOT):
            assert await culled_at(now) == []
        # Someone starts waiting now: the idle server is warned for the whole lead, then stopped.
        with waiting(testbed, hub_namespace, since=now):
            warned = await deadline_of(idle, now)
            assert (warned["reason"], warned["warning"]) == ("demand", True)
            assert parse_timestamp(warned["cull_at"]) == now + timedelta(seconds=600)
            assert (await deadline_of(busy, now))["warning"] is False
            assert await culled_at(now + timedelta(seconds=300)) == []
            assert hub.server_running(idle)
            record_activity(hub, busy, now + timedelta(seconds=570))
            assert await culled_at(now + timedelta(seconds=600)) == [(idle, "", "demand")]
            assert not hub.server_running(idle)
            assert hub.server_running(busy)
            assert metrics.registry.get_sample_value("fracnb_queue_length", {"slot_kind": SLOT}) == 1
        stopped = metrics.registry.get_sample_value(
            "fracnb_culled_servers_total", {"reason": "demand", "profile": "quarter"}
        )
        assert stopped == 1
        # The wait is over; the busy server, untouched, goes on under its usual timeout.
        assert await culled_at(now + timedelta(minutes=11)) == []
        assert metrics.registry.get_sample_value("fracnb_queue_length", {"slot_kind": SLOT}) is None
        assert hub.server_running(busy)
        # The culled server's pod is this test's stand-in: the hub's spawner would have deleted it.
        testbed.delete_pod(hub_namespace, f"jupyter-{idle}", grace_seconds=0)
        assert (await culled_at(now + timedelta(minutes=11))) == []
        assert metrics.registry.get_sample_value("fracnb_group_allocated_gpus", {"group": team}) == 0.25
    finally:
        api.close()


def test_the_queue_is_listed_for_admins_only(hub, new_user, testbed, hub_namespace):
    admin, researcher = new_user("admin"), new_user("researcher")
    assert hub.api("PATCH", f"users/{admin}", {"admin": True})[0] == 200
    url = hub.service_url + "api/queue"
    base = utcnow() - timedelta(minutes=10)
    with (
        waiting(testbed, hub_namespace, since=base) as first,
        waiting(testbed, hub_namespace, since=base - timedelta(minutes=5), slot=OTHER_SLOT) as earlier,
        waiting(testbed, hub_namespace, since=base + timedelta(minutes=5), priority=10) as urgent,
        waiting(testbed, hub_namespace, since=base + timedelta(minutes=1), kueue=True) as on_kueue,
    ):
        status, body = hub.http("GET", url, token=user_token(hub, admin))
        assert status == 200, body
        mine = [entry for entry in body["queue"] if entry["user"] in {first, earlier, urgent, on_kueue}]
        assert [entry["user"] for entry in mine] == [urgent, earlier, first, on_kueue]
        assert mine[0]["priority"] == 10
        assert (mine[0]["engine"], mine[0]["local_queue"]) == ("builtin", "")
        assert (mine[3]["engine"], mine[3]["local_queue"]) == ("kueue", f"{hub_namespace}/fracnb-{on_kueue}")
        assert mine[0]["slot_kind"] == SLOT
        assert mine[1]["queued_at"] == isoformat(base - timedelta(minutes=5))
        assert 15 * 60 <= mine[1]["waited_seconds"] < 20 * 60
        assert (mine[2]["profile"], mine[2]["server"], mine[2]["namespace"]) == ("quarter", "", hub_namespace)
        # The same rules as the rest of the API: no token, a wrong token, a user's, or an admin's
        # token without access to the service are all refused, and none of them sees the queue.
        refusals = {
            "no token": None,
            "forged token": secrets.token_hex(16),
            "a researcher": user_token(hub, researcher),
            "an admin without access": user_token(hub, admin, scopes=("read:users:activity!user",)),
        }
        for who, token in refusals.items():
            status, body = hub.http("GET", url, token=token)
            assert status == 403, who
            assert first not in str(body), who
        _, body = hub.http("GET", url, token=user_token(hub, researcher))
        assert body["message"] == "only hub admins may read the queue"
        # The admin's part of the service page lists the same, in the same order; a user's has no such part.
        status, html = hub.http("GET", hub.service_url, token=user_token(hub, admin))
        assert status == 200
        queue = html[html.index('<section id="queue">') :]
        queue = queue[: queue.index("</section>")]
        assert queue.index(urgent) < queue.index(earlier) < queue.index(first) < queue.index(on_kueue)
        assert "its team's quota in Kueue" in queue[queue.index(on_kueue) :]
        assert "15 min (since" in queue or "16 min (since" in queue
        _, html = hub.http("GET", hub.service_url, token=user_token(hub, researcher))
        assert 'id="queue"' not in html
    status, body = hub.http("GET", url, token=user_token(hub, admin))
    assert not [entry for entry in body["queue"] if entry["user"] in {first, earlier, urgent}]
