"""Training demand for borrowed cards, as the fracnb service reads it, against literal pods."""

from __future__ import annotations

from datetime import datetime, timezone

from fracnb_spawner.borrowing.demand import training_demand, with_training_demand

KIND = "gpu.nvidia.com.any.h100-dra-0"
TRAINING = {"kubernetes.io/hostname": "h100-dra-0"}
EARLY, LATE = datetime(2026, 1, 5, 9, tzinfo=timezone.utc), datetime(2026, 1, 5, 10, tzinfo=timezone.utc)


def borrower(**labels: str) -> dict:
    return {"metadata": {"labels": {"fracnb.io/slot-kind": KIND, "fracnb.io/borrowed": "true", **labels}},
            "spec": {"nodeName": "h100-dra-0", "nodeSelector": TRAINING}}  # fmt: skip


def batch(created: datetime = EARLY, *, priority: int = -100, selector: dict | None = None, **spec: object) -> dict:
    return {
        "metadata": {"name": "train", "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ")},
        "spec": {"priority": priority, "nodeSelector": selector or {},
                 "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "whole"}], **spec},
        "status": {"phase": "Pending"},
    }  # fmt: skip


def test_a_pending_batch_pod_that_could_run_on_the_pool_is_demand_for_its_borrowers() -> None:
    assert training_demand([borrower()], [batch(LATE), batch(EARLY, selector=TRAINING)]) == {KIND: EARLY}


def test_what_is_no_demand_for_a_borrowed_card() -> None:
    not_demand = [
        batch(priority=0),  # a notebook's priority: not training
        batch(selector={"kubernetes.io/hostname": "a100-dra-0"}),  # cannot run on the borrowed pool
        batch(nodeName="h100-dra-0"),  # scheduled already
        batch(schedulingGates=[{"name": "kueue.x-k8s.io/admission"}]),  # waits for its queue, not a card
        {**batch(), "spec": {"priority": -100, "containers": [{"name": "cpu"}]}},  # asks for no GPU
    ]
    assert training_demand([borrower()], not_demand) == {}
    assert training_demand([{**borrower(), "metadata": {"labels": {"fracnb.io/slot-kind": KIND}}}], [batch()]) == {}


def test_an_extended_gpu_resource_counts_as_asking_for_a_gpu() -> None:
    pod = batch()
    pod["spec"] = {"priority": -5, "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    assert training_demand([borrower()], [pod]) == {KIND: EARLY}


def test_training_demand_joins_the_slot_demand_at_the_earlier_time() -> None:
    assert with_training_demand({KIND: LATE, "other": LATE}, {KIND: EARLY}) == {KIND: EARLY, "other": LATE}
    assert with_training_demand({KIND: EARLY}, {KIND: LATE}) == {KIND: EARLY}
