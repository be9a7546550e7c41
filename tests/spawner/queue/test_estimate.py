"""The queue's estimate: a holder's deadline as the fracnb service decides it (its page says the same),
no estimate past the horizon or the spawn's own wait, and the time read through the clock seam."""

from __future__ import annotations

import copy
import re
from datetime import timedelta
from fractions import Fraction
from types import SimpleNamespace

from fracnb_spawner.cluster.view import trim_pod
from fracnb_spawner.common.podkeys import KUEUE_ADMISSION_GATE, KUEUE_QUEUE_LABEL
from fracnb_spawner.culling import CullPolicy, Reason, ServerActivity
from fracnb_spawner.queue.builtin import BuiltinPlace
from fracnb_spawner.queue.config import FracnbQueue
from fracnb_spawner.queue.coordinator import Ticket
from fracnb_spawner.queue.kueue.place import FormQuotaReads, KueuePlace
from fracnb_spawner.queue.kueue.quota import TeamQuota
from fracnb_spawner.queue.releases import ESTIMATE_HORIZON, CullDefaults, Release, estimate, holder_releases
from fracnb_spawner.queue.spawning import SpawnQueue
from fracnb_spawner.queue.text import queued_message
from fracnb_spawner.service.cullpass import CullSettings, index_pods, judge_for
from tests.spawner.queue.fakes import KIND, T0, FakeClock, ask, gated, running

WARNING_LEAD = 300
# Carol's server: idle for 20 min; its idle timeout says 15 min more, its timeout under demand 4 min.
CAROL = running(
    "carol", **{"fracnb.io/idle-timeout": "2100", "fracnb.io/idle-timeout-under-demand": "1440"}
)  # fmt: skip
CAROL_MODEL = {"started": "2026-11-23T13:00:00Z", "last_activity": "2026-11-23T13:40:00Z", "ready": True}
DEFAULTS = CullDefaults(CullPolicy(idle_timeout=3600), WARNING_LEAD)


def hub_records(user: str | None, server: str) -> ServerActivity | None:
    """The hub's database: carol's server started at 13:00 and was last active at 13:40."""
    if user != "carol":
        return None
    return ServerActivity(started=T0 - timedelta(hours=1), last_activity=T0 - timedelta(minutes=20))


def watched(*pods: dict) -> list[dict]:
    """The pods as the hub's watch keeps them."""
    return [trim_pod(p) for p in pods]


def test_a_waiting_spawn_is_told_the_deadline_under_demand_that_the_services_page_shows() -> None:
    ann = gated("ann", T0 - timedelta(minutes=10))
    (release,) = holder_releases(watched(CAROL, ann), KIND, hub_records, T0, DEFAULTS)
    assert release == Release(T0 + timedelta(minutes=4), Reason.DEMAND, "0.25")
    # The service's page, deciding from the same pods and the same hub record, shows that deadline.
    judge = judge_for(CullSettings(DEFAULTS.policy, WARNING_LEAD), [CAROL, ann], T0)
    _policy, decision = judge(CAROL_MODEL, index_pods([CAROL, ann])[("carol", "")], ("carol", ""))
    assert (decision.cull_at, decision.reason) == (release.at, release.reason)
    assert "Estimated start about 14:04 UTC, in 4 min: an idle 0.25 GPU server is due to be stopped then." in (
        queued_message(None, 1, release, T0)
    )


def test_demand_that_has_just_begun_waits_the_warning_lead_as_the_service_does() -> None:
    ann = gated("ann", T0 - timedelta(minutes=1))
    (release,) = holder_releases(watched(CAROL, ann), KIND, hub_records, T0, DEFAULTS)
    assert release.at == T0 - timedelta(minutes=1) + timedelta(seconds=WARNING_LEAD)


def test_without_anyone_waiting_the_plain_idle_timeout_holds() -> None:
    (release,) = holder_releases(watched(CAROL), KIND, hub_records, T0, DEFAULTS)
    assert release == Release(T0 + timedelta(minutes=15), Reason.IDLE, "0.25")


def test_a_pod_without_timeouts_gets_the_services_defaults_and_unknown_servers_none() -> None:
    plain = running("carol")
    (release,) = holder_releases(watched(plain), KIND, hub_records, T0, DEFAULTS)
    assert release.at == T0 + timedelta(minutes=40)  # the service's default idle timeout, 1 h
    assert holder_releases(watched(running("dave")), KIND, hub_records, T0, DEFAULTS) == []
    assert holder_releases(watched(plain), "another-kind", hub_records, T0, DEFAULTS) == []


def test_an_estimate_past_the_horizon_or_the_spawns_wait_is_none() -> None:
    far = Release(T0 + timedelta(minutes=1438), Reason.MAX_AGE, "0.25")
    assert estimate([far], 1, T0) is None
    assert "No estimate yet" in queued_message(None, 1, estimate([far], 1, T0), T0)
    edge = Release(T0 + ESTIMATE_HORIZON, Reason.IDLE, "0.25")
    assert estimate([edge], 1, T0) == edge
    soon = Release(T0 + timedelta(minutes=30), Reason.IDLE, "0.25")
    assert estimate([soon], 1, T0, gives_up_at=T0 + timedelta(minutes=29)) is None
    assert estimate([soon], 1, T0, gives_up_at=T0 + timedelta(minutes=30)) == soon


def spawn_queue(clock: FakeClock, *pods: dict) -> SpawnQueue:
    """Ann's spawn, waiting 1st in line for a quarter of :data:`KIND`, beside a hub watch holding ``pods``."""
    view = SimpleNamespace(pods=SimpleNamespace(objects=lambda: watched(*pods)))
    host = SimpleNamespace(queue_settings=lambda: SimpleNamespace(zone=None), pod_reflector=None)
    coordinator = SimpleNamespace(view=view)
    queue = SpawnQueue(host, lambda: coordinator, hub_records, lambda: DEFAULTS, clock)
    queue.reset(ask(), max_wait=3600)
    queue.place = place = BuiltinPlace(queue, coordinator)
    place.ticket = Ticket(
        key="jhub/jupyter-ann", ask=queue.ask, user="ann", groups={}, priority=0,
        queued_at=T0 - timedelta(minutes=10), max_wait=3600, gated=True, position=1,
    )  # fmt: skip
    return queue


def test_the_progress_headline_reads_the_time_from_the_spawn_queues_clock() -> None:
    clock = FakeClock()
    queue = spawn_queue(clock, CAROL, gated("ann", T0 - timedelta(minutes=10)))
    assert "Estimated start about 14:04 UTC, in 4 min:" in queue.status_text()
    clock.advance(120)
    assert "Estimated start about 14:04 UTC, in 2 min:" in queue.status_text()
    clock.advance(180)  # past the deadline: the server is being stopped, no later one is known
    assert "No estimate yet" in queue.status_text()


def test_the_progress_pages_headline_carries_the_estimate_as_a_time_the_page_localises() -> None:
    queue = spawn_queue(FakeClock(), CAROL, gated("ann", T0 - timedelta(minutes=10)))
    html = str(queue.status_html())
    assert re.search(
        r'about <time datetime="\d{4}-\d\d-\d\dT14:04:\d\dZ" data-fracnb-time="clock">14:04 UTC</time>, in 4 min', html
    )
    assert re.sub(r"<[^>]+>", "", html) == queue.status_text()


def in_local_queue(made: dict, local_queue: str) -> dict:
    """``made`` in Kueue's hands through the LocalQueue ``local_queue`` (of its namespace, jhub)."""
    made["metadata"]["labels"][KUEUE_QUEUE_LABEL] = local_queue
    return made


async def test_with_kueue_the_form_gives_the_estimate_that_the_progress_page_then_gives() -> None:
    """The form said "no estimate" while the progress page, seconds after the start, gave a time: both read the
    due stops of the servers holding the team's quota, with the demand the joining spawn makes."""
    clock = FakeClock()
    carol = in_local_queue(copy.deepcopy(CAROL), "fracnb-carol")
    pods = [carol]
    view = SimpleNamespace(pods=SimpleNamespace(objects=lambda: watched(*pods)))
    host = SimpleNamespace(
        queue_settings=lambda: FracnbQueue(engine="kueue"), pod_reflector=None, user=SimpleNamespace(name="bob")
    )
    queue = SpawnQueue(host, lambda: SimpleNamespace(view=view), hub_records, lambda: DEFAULTS, clock)
    # team-a's quarter is carol's; fracnb-bob, bob's LocalQueue, is team-a's too.
    quota = TeamQuota("team-a", 250, 250, 0, 0, "university", frozenset({"jhub/fracnb-carol", "jhub/fracnb-bob"}))

    async def read() -> TeamQuota:
        return quota

    queue.form_quota = FormQuotaReads(read, clock)
    form = await queue.form_text(ask(), 3600, Fraction(1, 4))
    assert form == "queue: 0 waiting for team-a's 0.25 GPU (all in use), about 5 min"  # the warning lead: 5 min
    # Bob starts it: his pod waits on Kueue's gate, next in line, and the progress page says the same time.
    queue.reset(ask(), max_wait=3600)
    bob = in_local_queue(gated("bob", T0), "fracnb-bob")
    bob["spec"]["schedulingGates"] = [{"name": KUEUE_ADMISSION_GATE}]
    pods.append(bob)
    queue.place = place = KueuePlace(queue)  # as Kueue's view read it: bob next in line
    place.text = "Waiting in the GPU queue: next in line; waiting for 0.25 GPU of team-a's quota."
    place.position, place.holder_queues, place.queued_at = 0, quota.holder_queues, T0
    assert "Estimated start about 14:05 UTC, in 5 min:" in queue.status_text()
