"""The kueue engine's reading of quotas and demand, as Kueue v0.17 writes its objects (literal dicts): the spawn
form's line per choice, from the team's ClusterQueue and its cohort; the culler's demand, from the Workloads waiting
across a cohort."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime, timezone
from fractions import Fraction

from fracnb_spawner.culling import CullPolicy
from fracnb_spawner.queue.kueue.place import FormQuotaReads
from fracnb_spawner.queue.kueue.quota import TeamQuota, local_queue_demand, quota_form_text, team_quota
from fracnb_spawner.queue.localqueues import local_queue_of
from fracnb_spawner.service.cullpass import Judge, PodFacts
from tests.spawner.queue.fakes import FakeClock


def cluster_queue(name: str, nominal: str, used: str, *, cohort: str | None = "university", pending: int = 0,
                  borrowing_limit: str | None = None, lending_limit: str | None = None) -> dict:  # fmt: skip
    gpu = {"name": "fracnb.io/gpu-milli", "nominalQuota": nominal}
    if borrowing_limit is not None:
        gpu["borrowingLimit"] = borrowing_limit
    if lending_limit is not None:
        gpu["lendingLimit"] = lending_limit
    spec = {"resourceGroups": [{"coveredResources": ["cpu", "fracnb.io/gpu-milli"], "flavors": [
        {"name": "a100-ts4", "resources": [{"name": "cpu", "nominalQuota": "256"}, gpu]}]}]}  # fmt: skip
    if cohort:
        spec["cohortName"] = cohort
    usage = [{"name": "a100-ts4", "resources": [{"name": "cpu", "total": "1"},
              {"name": "fracnb.io/gpu-milli", "total": used, "borrowed": "0"}]}]  # fmt: skip
    return {"metadata": {"name": name}, "spec": spec, "status": {"flavorsUsage": usage, "pendingWorkloads": pending}}


def test_a_team_with_unused_quota_or_an_idle_cohort_to_borrow_from_shows_no_queue():
    queues = [cluster_queue("team-a", "1k", "250"), cluster_queue("team-b", "1000", "1000")]
    assert team_quota(queues, "team-a") == TeamQuota("team-a", 1000, 250, 0, 0, "university")
    assert quota_form_text(team_quota(queues, "team-a"), 500) is None
    queues = [cluster_queue("team-a", "250", "250"), cluster_queue("team-b", "250", "0")]
    assert team_quota(queues, "team-a").borrowable == 250
    assert quota_form_text(team_quota(queues, "team-a"), 250) is None


def test_quota_another_team_borrows_already_is_not_borrowable_twice():
    # team-c runs 0.5 on its 0.25: it borrows team-b's idle quarter, so team-a has nothing left to borrow.
    queues = [cluster_queue("team-a", "250", "250"), cluster_queue("team-b", "250", "0"),
              cluster_queue("team-c", "250", "500")]  # fmt: skip
    assert team_quota(queues, "team-a").borrowable == 0
    assert quota_form_text(team_quota(queues, "team-a"), 250) is not None
    # A queue borrowing already has only the rest of its limit left.
    queues = [cluster_queue("team-a", "250", "500", borrowing_limit="500"), cluster_queue("team-b", "1000", "0")]
    assert team_quota(queues, "team-a").borrowable == 250
    # Outside a cohort there is nothing to borrow.
    assert team_quota([cluster_queue("team-a", "250", "250", cohort=None)], "team-a").borrowable == 0


def test_a_peer_lends_no_more_than_its_lending_limit():
    # team-b keeps 0.75 of its 1 GPU (lendingLimit 0.25); team-c lends all of its idle 1 GPU.
    queues = [cluster_queue("team-a", "250", "250"), cluster_queue("team-b", "1000", "0", lending_limit="250"),
              cluster_queue("team-c", "1000", "0")]  # fmt: skip
    assert team_quota(queues, "team-a").borrowable == 1250  # not 2000: team-b's 0.75 is not lent
    # team-c now borrows 0.25 beyond its own: the cohort's lent quota (0.25 + 0.25 + 0.25) is all used.
    queues = [cluster_queue("team-a", "250", "250"), cluster_queue("team-b", "1000", "0", lending_limit="250"),
              cluster_queue("team-c", "250", "500")]  # fmt: skip
    assert team_quota(queues, "team-a").borrowable == 0
    assert quota_form_text(team_quota(queues, "team-a"), 250) == (
        "queue: 0 waiting for team-a's 0.25 GPU (all in use), no estimate"
    )
    # A lending limit holds back only what others borrow: team-b's own quota is all its own.
    assert team_quota(queues, "team-b") == TeamQuota("team-b", 1000, 0, 0, 0, "university")
    queues[2] = cluster_queue("team-c", "1000", "0")
    assert team_quota(queues, "team-b").borrowable == 1000  # team-c's idle 1 GPU


def test_a_used_quota_with_nothing_to_borrow_says_the_spawn_would_wait():
    queues = [cluster_queue("team-a", "250", "250", pending=1), cluster_queue("team-b", "250", "250")]
    assert quota_form_text(team_quota(queues, "team-a"), 250) == (
        "queue: 1 waiting for team-a's 0.25 GPU (all in use), no estimate"
    )
    queues = [cluster_queue("team-a", "1000", "750"), cluster_queue("team-b", "1000", "1000")]
    assert quota_form_text(team_quota(queues, "team-a"), 500) == (
        "queue: 0 waiting for team-a's 1 GPU (0.25 unused), no estimate"
    )


def test_others_waiting_first_mean_a_wait_and_borrowing_stops_at_the_limit():
    queues = [cluster_queue("team-a", "1000", "0", pending=2), cluster_queue("team-b", "1000", "0")]
    assert quota_form_text(team_quota(queues, "team-a"), 250).startswith("queue: 2 waiting")  # StrictFIFO
    queues = [cluster_queue("team-a", "250", "250", borrowing_limit="250"), cluster_queue("team-b", "1000", "0")]
    assert team_quota(queues, "team-a").borrowable == 250
    assert quota_form_text(team_quota(queues, "team-a"), 500) is not None


def test_outside_a_cohort_nothing_is_borrowed_and_an_unknown_team_has_no_line():
    queues = [cluster_queue("no-team", "250", "250", cohort=None), cluster_queue("team-b", "1000", "0", cohort=None)]
    assert team_quota(queues, "no-team").borrowable == 0
    assert team_quota(queues, "absent") is None


def workload(namespace: str, queue: str, created: str, *, milli: int = 250, reserved: bool = False) -> dict:
    """A Workload as Kueue v0.17 writes it: its LocalQueue, what it asks for, whether it has quota."""
    conditions = [{"type": "QuotaReserved", "status": "True" if reserved else "False"}]
    requests = [{"name": "main", "resources": {"fracnb.io/gpu-milli": str(milli), "cpu": "1"}}]
    return {"metadata": {"namespace": namespace, "creationTimestamp": created}, "spec": {"queueName": queue},
            "status": {"conditions": conditions, "resourceRequests": requests}}  # fmt: skip


def local(namespace: str, name: str, cluster_queue_name: str) -> dict:
    return {"metadata": {"namespace": namespace, "name": name}, "spec": {"clusterQueue": cluster_queue_name}}


def test_a_batch_workload_waiting_in_the_cohort_is_demand_for_every_local_queue_of_it():
    queues = [cluster_queue("team-a", "250", "250"), cluster_queue("team-b", "250", "250"),
              cluster_queue("no-team", "250", "250", cohort=None)]  # fmt: skip
    locals_ = [local("jhub", "fracnb-ann", "team-a"), local("batch", "training", "team-b"),
               local("jhub", "fracnb-admin", "no-team")]  # fmt: skip
    waiting = [
        workload("batch", "training", "2026-11-23T14:05:00Z"),
        workload("batch", "training", "2026-11-23T14:01:00Z"),
        workload("batch", "training", "2026-11-23T13:00:00Z", reserved=True),  # admitted: no demand
        workload("batch", "training", "2026-11-23T12:00:00Z", milli=0),  # asks for no GPU
    ]
    demand = local_queue_demand(waiting, locals_, queues)
    since = datetime(2026, 11, 23, 14, 1, tzinfo=timezone.utc)
    assert demand == {"jhub/fracnb-ann": since, "batch/training": since}  # team-b may borrow what ann frees
    assert local_queue_demand([workload("jhub", "fracnb-admin", "2026-11-23T14:02:00Z")], locals_, queues) == {
        "jhub/fracnb-admin": datetime(2026, 11, 23, 14, 2, tzinfo=timezone.utc)  # outside a cohort: its own only
    }


def test_the_culler_takes_kueues_demand_for_a_server_in_such_a_local_queue():
    since = datetime(2026, 11, 23, 14, 1, tzinfo=timezone.utc)
    judge = Judge(CullPolicy(), 600, {}, since, None, {"jhub/fracnb-ann": since})
    ann = PodFacts(annotations={}, profile="quarter", fraction=Fraction(1, 4), local_queue="jhub/fracnb-ann")
    assert judge.demand_for(ann) == since
    assert judge.demand_for(replace(ann, local_queue="jhub/fracnb-bob")) is None
    assert judge.demand_for(replace(ann, queued=True)) is None  # a waiting server holds nothing
    assert local_queue_of(
        {"metadata": {"namespace": "jhub", "labels": {"kueue.x-k8s.io/queue-name": "fracnb-ann"}}}
    ) == ("jhub/fracnb-ann")


def test_one_view_of_the_form_reads_the_team_quota_once_for_all_its_rows():
    reads: list[int] = []
    queues = [cluster_queue("team-a", "500", "500", pending=1)]

    async def read() -> TeamQuota | None:
        reads.append(1)
        await asyncio.sleep(0)  # the rows ask while the read is under way
        return team_quota(queues, "team-a")

    async def view(forms: FormQuotaReads) -> list[str | None]:
        return list(await asyncio.gather(*(forms.form_text(Fraction(share)) for share in ("1/4", "1/2", "1"))))

    clock = FakeClock()
    forms = FormQuotaReads(read, clock, fresh_seconds=2)
    texts = asyncio.run(view(forms))
    assert len(reads) == 1
    assert texts == [quota_form_text(team_quota(queues, "team-a"), milli) for milli in (250, 500, 1000)]
    clock.advance(1)
    asyncio.run(view(forms))
    assert len(reads) == 1  # the same view, a second later
    clock.advance(2)
    asyncio.run(view(forms))
    assert len(reads) == 2  # the next view reads again
