"""The reclaim rule's view of the cluster (pure), against literal API objects: devices as cards, claims'
pods as holders, PodDisruptionBudgets as budgets."""

from __future__ import annotations

from fracnb_spawner.cluster.devices import DraWant, schedulable_nodes, trim_claim
from fracnb_spawner.reclaim.cluster import budgets_of, dra_cards, need_of, usable_cards
from fracnb_spawner.reclaim.victims import Policy, choose_victims
from tests.spawner.cluster.test_devices import DRIVER, GIB, QUARTER_A100, SLICES, gpu, slice_


def pod(name: str, *, namespace: str = "batch", priority: int | None = -100, created: str = "2026-11-28T09:00:00Z",
        labels: dict | None = None, notebook: bool = False, leaving: bool = False) -> dict:  # fmt: skip
    metadata: dict = {"name": name, "namespace": namespace, "creationTimestamp": created, "labels": labels or {}}
    if notebook:
        metadata["annotations"] = {"hub.jupyter.org/username": name}
    if leaving:
        metadata["deletionTimestamp"] = "2026-11-28T10:00:00Z"
    return {"metadata": metadata, "spec": {} if priority is None else {"priority": priority}}


def held(pool: str, device: str, owner: tuple[str, str] | None, memory: str | None = None) -> dict:
    result = {"request": "gpu", "driver": DRIVER, "pool": pool, "device": device}
    if memory:
        result["consumedCapacity"] = {"memory": memory}
    metadata: dict = {"name": f"c-{device}-{owner}", "namespace": owner[0] if owner else "x"}
    if owner:
        metadata["ownerReferences"] = [{"kind": "Pod", "name": owner[1]}]
    return trim_claim({"metadata": metadata, "status": {"allocation": {"devices": {"results": [result]}}}})


def test_devices_become_cards_held_by_the_claims_pods() -> None:
    pods = [pod("train"), pod("jupyter-ann", namespace="jhub", priority=0, notebook=True), pod("gone", leaving=True)]
    claims = [
        held("whole", "gpu-0", ("batch", "train")),  # a whole-device claim consumes no capacity: it holds all
        held("a100", "gpu-0", ("jhub", "jupyter-ann"), "20Gi"),
        held("a100", "gpu-0", ("batch", "gone"), "40Gi"),
        held("a100", "gpu-0", None, "10Gi"),  # a claim made by hand: never a victim
    ]
    cards = {card.key: card for card in dra_cards(SLICES, claims, pods)}
    (train,) = cards[f"{DRIVER}/whole/gpu-0"].holders
    assert (train.amount, train.priority, train.notebook) == (80 * GIB, -100, False)
    ann, gone, by_hand = cards[f"{DRIVER}/a100/gpu-0"].holders
    assert (ann.notebook, ann.leaving, gone.leaving, by_hand.notebook) == (True, False, True, True)
    assert cards[f"{DRIVER}/a100/gpu-0"].group == "a100"


def test_a_waiting_quarter_uses_only_its_products_cards_and_evicts_the_training_job() -> None:
    pods = [pod("train", created="2026-11-28T08:00:00Z"), pod("young", created="2026-11-28T09:30:00Z")]
    slices = [slice_("a", gpu("gpu-0")), slice_("h", gpu("gpu-0", "NVIDIA H100 80GB HBM3"))]
    claims = [held("a", "gpu-0", ("batch", "train")), held("h", "gpu-0", ("batch", "young"))]
    usable = usable_cards(slices, QUARTER_A100, None)
    assert usable == {f"{DRIVER}/a/gpu-0"}
    need = need_of(QUARTER_A100, pod("jupyter-bo", namespace="jhub", priority=0, notebook=True), usable)
    choice = choose_victims(need, dra_cards(slices, claims, pods), Policy())
    assert choice.victims == (("batch", "train"),)
    any_quarter = DraWant(DRIVER, "gpu", memory=20 * GIB)
    need = need_of(
        any_quarter, pod("jupyter-bo", namespace="jhub", priority=0), usable_cards(slices, any_quarter, None)
    )
    assert choose_victims(need, dra_cards(slices, claims, pods), Policy()).victims == (("batch", "young"),)


def test_budgets_cover_the_pods_their_selector_matches_in_their_namespace() -> None:
    pods = [pod("a", labels={"app": "train"}), pod("b", labels={"app": "train", "tier": "x"}),
            pod("c", namespace="other", labels={"app": "train"}), pod("d", labels={"app": "eval"})]  # fmt: skip
    pdbs = [
        {"metadata": {"namespace": "batch"}, "spec": {"selector": {"matchLabels": {"app": "train"}}},
         "status": {"disruptionsAllowed": 1}},
        {"metadata": {"namespace": "batch"}, "spec": {"selector": {"matchExpressions": [
            {"key": "tier", "operator": "DoesNotExist"}, {"key": "app", "operator": "In", "values": ["eval", "x"]}]}}},
    ]  # fmt: skip
    first, second = budgets_of(pdbs, pods)
    assert (first.pods, first.allowed) == ({("batch", "a"), ("batch", "b")}, 1)
    assert (second.pods, second.allowed) == ({("batch", "d")}, 0)  # no status yet: none allowed


def test_a_cordoned_nodes_cards_are_not_usable_as_the_hub_does_not_place_there() -> None:
    def node(name: str, *, cordoned: bool = False) -> dict:
        return {"metadata": {"name": name, "labels": {"gpu": "a100"}}, "spec": {"unschedulable": cordoned}}

    slices = [slice_("gpu-1", gpu("gpu-0")), slice_("gpu-2", gpu("gpu-0"))]
    on_a100_nodes = DraWant(DRIVER, "gpu", memory=20 * GIB, node_selector=(("gpu", "a100"),))
    nodes = [node("gpu-1"), node("gpu-2", cordoned=True)]
    assert usable_cards(slices, on_a100_nodes, schedulable_nodes(nodes)) == {f"{DRIVER}/gpu-1/gpu-0"}
    assert usable_cards(slices, on_a100_nodes, schedulable_nodes([])) == {
        f"{DRIVER}/gpu-1/gpu-0",
        f"{DRIVER}/gpu-2/gpu-0",
    }
