"""Borrowing a card of another pool, as pure functions against literal dicts: the plan's borrowing option, the
ledger that never counts a batch pod's card as free, the pod sent to the borrowable pool, and the configuration's
refusals. The queue's choice between the own pool and the borrowable one is in test_coordinator_borrows.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kubernetes_asyncio.client.models import V1Container, V1ObjectMeta, V1Pod, V1PodSpec, V1Toleration
from traitlets import TraitError
from traitlets.config import Config

from fracnb_spawner.borrowing.decide import (
    BorrowSettings,
    StrictResourceAsk,
    borrowed_pod,
    check_selector,
    check_tolerations,
    without_preemption,
)
from fracnb_spawner.cluster.slots import Cluster, ResourceAsk, slot_kind
from fracnb_spawner.config.profiles import initialize_profiles, select
from fracnb_spawner.configure import check_config
from fracnb_spawner.dryrun import summary
from fracnb_spawner.gpu.resolve import plan_gpu
from fracnb_spawner.spawnplan import plan_spawn
from tests.spawner.test_spawnplan import CONTEXT, DEFAULTS

RESOURCE = "nvidia.com/gpu.shared"
TS4 = {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}
TRAINING = {"fracnb.io/pool": "training"}
TAINT = {"key": "fracnb.io/pool", "operator": "Equal", "value": "training", "effect": "NoSchedule"}
PROFILES = initialize_profiles([
    {"display_name": "Quarter", "slug": "quarter", "gpu": {"fraction": "1/4"}},
    {"display_name": "Never waits", "slug": "now", "gpu": {"fraction": "1/4"}, "queue": {"max_wait": 0}},
])  # fmt: skip


def planned(slug: str, settings: BorrowSettings):
    selection = select(PROFILES, {"profile": slug})
    context = replace(CONTEXT, borrow=settings)
    return plan_spawn(selection, plan_gpu(selection.gpu, DEFAULTS), context, lambda name: name.startswith("nvidia"))


def test_a_queued_choice_may_borrow_the_marked_pool_keeping_its_backends_node_labels() -> None:
    plan = planned("quarter", BorrowSettings(TRAINING, (TAINT,)))
    borrow = plan.borrow
    assert borrow is not None
    assert borrow.own_kind == plan.ask.kind == slot_kind(RESOURCE, {"pool": "gpu", **TS4})
    assert borrow.ask.kind == slot_kind(RESOURCE, {**TRAINING, **TS4}) != borrow.own_kind
    assert borrow.node_selector == {**TRAINING, **TS4}  # the configured {"pool": "gpu"} is swapped out
    assert borrow.tolerations == (TAINT,)
    assert isinstance(borrow.ask, StrictResourceAsk)


def test_no_borrowing_when_off_for_a_choice_that_never_queues_or_from_its_own_pool() -> None:
    assert planned("quarter", BorrowSettings()).borrow is None
    assert planned("now", BorrowSettings(TRAINING)).borrow is None
    assert planned("quarter", BorrowSettings({"pool": "gpu"})).borrow is None  # its own pool: nothing to borrow


def node(name: str, labels: dict[str, str], units: int) -> dict:
    return {"metadata": {"name": name, "labels": labels}, "spec": {}, "status": {"allocatable": {RESOURCE: str(units)}}}


def batch_pod(node_name: str, units: int) -> dict:
    container = {"resources": {"limits": {RESOURCE: str(units)}}}
    return {"metadata": {"name": "train"}, "spec": {"nodeName": node_name, "priority": -100, "containers": [container]},
            "status": {"phase": "Running"}}  # fmt: skip


def test_a_borrower_never_counts_a_batch_pods_card_as_free() -> None:
    selector = {**TRAINING, **TS4}
    ask = ResourceAsk(slot_kind(RESOURCE, selector), RESOURCE, selector, 1)
    cluster = Cluster([node("train-0", selector, 4)], [batch_pod("train-0", 4)])
    assert ask.ledger(cluster).take(ask), (
        "a notebook of its own pool counts batch units as free: the scheduler preempts"
    )
    strict = without_preemption(ask)
    assert strict.kind == ask.kind
    assert not strict.ledger(cluster).take(strict)
    assert without_preemption(strict) is strict
    assert strict.ledger(Cluster([node("train-0", selector, 4)], [batch_pod("train-0", 3)])).take(strict)


def test_the_pod_goes_to_the_borrowable_pool_and_says_it_borrows() -> None:
    plan = planned("quarter", BorrowSettings(TRAINING, (TAINT,)))
    pod = V1Pod(
        metadata=V1ObjectMeta(name="jupyter-ann", labels={"fracnb.io/slot-kind": plan.ask.kind}, annotations={}),
        spec=V1PodSpec(node_selector={"pool": "gpu", **TS4}, containers=[V1Container(name="notebook")]),
    )
    borrowed_pod(pod, plan.borrow)
    assert pod.spec.node_selector == {**TRAINING, **TS4}
    assert pod.spec.tolerations == [V1Toleration(key="fracnb.io/pool", operator="Equal", value="training",
                                                 effect="NoSchedule")]  # fmt: skip
    assert pod.metadata.labels == {"fracnb.io/slot-kind": plan.borrow.ask.kind, "fracnb.io/borrowed": "true"}
    assert pod.metadata.annotations == {"fracnb.io/borrowed-from": plan.ask.kind}
    assert pod.spec.priority_class_name is None  # it keeps notebook priority


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["pool"], "is not a mapping"),
        ({"pool": 3}, "'pool': 3 is not a string"),
        ({"bad key!": "x"}, "'bad key!'"),
    ],
)
def test_a_bad_selector_says_what_is_wrong(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_selector(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"key": "a"}, "is not a list"),
        ([{"key": "a", "colour": "red"}], r"toleration 0: unknown keys \['colour'\]"),
        ([{"key": "a", "operator": "Near"}], "operator 'Near' is not one of"),
        ([{"key": "a", "effect": "NoRun"}], "effect 'NoRun' is not one of"),
        ([{"key": "a", "tolerationSeconds": "60"}], "tolerationSeconds '60' is not a whole number"),
    ],
)
def test_bad_tolerations_say_what_is_wrong(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_tolerations(value)


def test_the_hub_refuses_bad_borrowing_config_at_start_naming_the_key() -> None:
    c = Config()
    c.FractionalSpawner.borrowable_node_selector = {"pool": ["training"]}
    with pytest.raises(TraitError, match=r"FractionalSpawner\.borrowable_node_selector: 'pool'"):
        check_config(c)
    c = Config()
    c.FractionalSpawner.borrowable_tolerations = [{"key": "pool", "operator": "Near"}]
    with pytest.raises(TraitError, match=r"FractionalSpawner\.borrowable_tolerations: toleration 0"):
        check_config(c)
    c = Config()
    c.FractionalSpawner.borrowable_node_selector = TRAINING
    check_config(c)
    c.FracnbQueue.engine = "kueue"
    with pytest.raises(TraitError, match="borrowable_node_selector: borrowing needs fracnb's own queue"):
        check_config(c)


def borrowing_line(c: Config) -> str:
    lines = summary(c, backends=["dra"])
    return lines[lines.index("borrowing a training card (docs/lending.md):") + 1]


def test_the_dry_run_says_whether_and_where_a_start_borrows() -> None:
    c = Config()
    assert borrowing_line(c).startswith("  off (FractionalSpawner.borrowable_node_selector is empty)")
    c.FractionalSpawner.borrowable_node_selector = TRAINING
    c.FractionalSpawner.borrowable_tolerations = [TAINT]
    assert borrowing_line(c) == (
        "  a queued GPU start whose own pool is full starts on a free card of nodes "
        "fracnb.io/pool=training, with 1 toleration(s), never preempting there, at once or when its turn comes; "
        "idle borrowers get their timeout under demand while training waits; batch pods there keep their cards "
        "(FracnbReclaim is off)"
    )
    c.FracnbReclaim.enabled = True
    assert borrowing_line(c).endswith(
        "with FracnbReclaim on, batch pods there are evicted for a waiting start under its rule when its own pool "
        "has no room to make (dra)"
    )
    c.FracnbQueue.engine = "kueue"
    assert "under Kueue, borrowing between teams is Kueue's cohort borrowing" in borrowing_line(c)
