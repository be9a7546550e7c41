"""Lending and reclaim in the replay: the batch side's lending rule, and the product's reclaim rule fed the
replay's cards (the rule itself is tested in tests/spawner/reclaim)."""

from __future__ import annotations

from fractions import Fraction

from bench.replay_claims import ClaimCard
from bench.replay_lending import cards_to_lend, reclaim_cards, victims_for

EIGHTH, HALF = Fraction(1, 8), Fraction(1, 2)
GIB = 2**30
CARD = 32 * GIB
NS = "replay"


def _pod(name: str, created: str, *, job: bool) -> dict:
    metadata = {"name": name, "namespace": NS, "creationTimestamp": created}
    if job:
        return {"metadata": {**metadata, "labels": {"replay.fracnb.io/job": "true"}}, "spec": {"priority": -100}}
    return {"metadata": {**metadata, "annotations": {"hub.jupyter.org/username": name}}, "spec": {"priority": 0}}


def _cluster() -> tuple[list[str], dict[str, ClaimCard], dict[str, dict]]:
    cards = ["dev-0/gpu-0", "dev-0/gpu-1", "dev-0/gpu-2", "dev-1/gpu-0"]
    placed = {
        "nb-a": ClaimCard("dev-0/gpu-0", Fraction(7, 8)),
        "job-old": ClaimCard("dev-0/gpu-1", Fraction(1)),
        "job-young": ClaimCard("dev-0/gpu-2", Fraction(1)),
        "job-mid": ClaimCard("dev-1/gpu-0", Fraction(1)),
    }
    pods = {
        "nb-a": _pod("nb-a", "2026-03-02T07:00:00Z", job=False),
        "job-old": _pod("job-old", "2026-03-02T07:00:00Z", job=True),
        "job-young": _pod("job-young", "2026-03-02T09:00:00Z", job=True),
        "job-mid": _pod("job-mid", "2026-03-02T08:00:00Z", job=True),
    }
    return cards, placed, pods


def test_the_replay_cards_carry_each_claims_pod_as_the_service_reads_it() -> None:
    cards = reclaim_cards(*_cluster(), NS, CARD)
    by_key = {card.key: card for card in cards}
    assert set(by_key) == {"dev-0/gpu-0", "dev-0/gpu-1", "dev-0/gpu-2", "dev-1/gpu-0"}
    (notebook,) = by_key["dev-0/gpu-0"].holders
    assert (notebook.pod, notebook.amount, notebook.notebook) == ((NS, "nb-a"), 28 * GIB, True)
    (job,) = by_key["dev-0/gpu-1"].holders
    assert (job.amount, job.priority, job.notebook) == (CARD, -100, False)
    assert by_key["dev-1/gpu-0"].group == "dev-1"


def test_waiting_notebooks_evict_the_youngest_lent_jobs_and_never_a_notebook() -> None:
    cards = reclaim_cards(*_cluster(), NS, CARD)
    assert victims_for([("nb-b", EIGHTH)], cards, NS, CARD) == []  # fits the room left on gpu-0
    assert victims_for([("nb-b", Fraction(1, 4))], cards, NS, CARD) == ["job-young"]
    assert victims_for([("nb-b", HALF), ("nb-c", HALF), ("nb-d", HALF)], cards, NS, CARD) == [
        "job-young",
        "job-mid",
    ]
    assert victims_for([("nb-b", HALF), ("nb-c", 1)], cards, NS, CARD, per_step=1) == ["job-young"]


def test_cards_are_lent_only_while_no_notebook_waits_one_job_per_free_card() -> None:
    assert cards_to_lend(["dev/0", "dev/1"], 0, ["j1", "j2", "j3"]) == [("j1", "dev/0"), ("j2", "dev/1")]
    assert cards_to_lend(["dev/0"], 1, ["j1"]) == []
    assert cards_to_lend([], 0, ["j1"]) == []
