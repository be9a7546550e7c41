"""Borrowing a training card: a borrower keeps it while in use, and gives it back once idle while training waits."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from bench.replay_day_borrowing import BORROWER_IDLE_UNDER_DEMAND, Borrowing, borrowing
from bench.replay_jobs import JOB_LABEL


def desk(name: str, profile: str, idle_for: int, busy: bool = False) -> Any:
    return SimpleNamespace(
        name=name,
        running_since=0,
        hub_activity=10_000 - idle_for,
        spawner=SimpleNamespace(user_options={"profile": profile}),
        kernel_busy=lambda: object() if busy else None,
    )


def job(name: str, node: str | None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {JOB_LABEL: "x"}}, "spec": {"nodeName": node}}


def run_with(*desks: Any) -> Borrowing:
    run = Borrowing()
    run.desks = {d.name: d for d in desks}
    return run


def test_only_the_borrow_profiles_borrow() -> None:
    assert borrowing("eighth-borrow")
    assert not borrowing("eighth")


def test_an_idle_borrower_is_stopped_while_a_training_job_waits_and_never_while_it_is_in_use() -> None:
    idle = BORROWER_IDLE_UNDER_DEMAND + 60
    run = run_with(
        desk("ann", "eighth-borrow", idle),
        desk("bob", "eighth-borrow", idle, busy=True),  # a running cell: it keeps the card
        desk("cy", "half-borrow", BORROWER_IDLE_UNDER_DEMAND - 60),  # not idle long enough
        desk("dee", "eighth", idle),  # on a development card: the profile's own timeouts apply
    )
    waiting = [job("train-1", None), job("train-2", "train-0")]
    assert run.borrowers_to_stop(waiting, 10_000) == {"ann": "demand"}
    assert run.borrowers_to_stop([job("train-2", "train-0")], 10_000) == {}  # no job waits: nobody goes
