"""What the service page counts and names, pure: GPU capacity per slot kind that the hub's choices use,
in GPU shares, on the nodes their selection picks only (not every node's units added up); choices
and slot kinds by the names users see; servers waiting in the queue said to wait, not to hold."""

from __future__ import annotations

from fractions import Fraction

from traitlets.config import Config

from fracnb_spawner.common.podkeys import KUEUE_ADMISSION_GATE, QUEUE_GATE
from fracnb_spawner.quota.policy import QuotaPolicy, allocations_from_pods, check_request, held_words
from fracnb_spawner.quota.words import quota_line
from fracnb_spawner.service.choices import hub_choices, shares_text, slot_kind_uses
from fracnb_spawner.service.page import use_rows
from fracnb_testbed.demo import PROFILES

A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}


def node(name: str, labels: dict, allocatable: dict) -> dict:
    return {
        "metadata": {"name": name, "labels": {**A100, **labels}},
        "spec": {},
        "status": {"allocatable": allocatable},
    }


def sliced(name: str, replicas: int, gpus: int, *, local: bool, strategy: str = "time-slicing") -> dict:
    labels = {
        "nvidia.com/gpu.sharing-strategy": strategy,
        "nvidia.com/gpu.replicas": str(replicas),
        "nvidia.com/gpu.count": str(gpus),
        "fracnb.io/runner": "local" if local else "kwok",
    }
    return node(name, labels, {"nvidia.com/gpu.shared": str(replicas * gpus)})


def pod(user: str, kind: str, *, units: int = 1, fraction: str = "1/4", node_name: str | None = "local-0",
        queued: bool = False) -> dict:  # fmt: skip
    spec: dict = {"containers": [{"resources": {"limits": {"nvidia.com/gpu.shared": str(units)}}}]}
    if node_name:
        spec["nodeName"] = node_name
    if queued:
        spec["schedulingGates"] = [{"name": QUEUE_GATE}]
    annotations = {
        "hub.jupyter.org/username": user,
        "hub.jupyter.org/servername": "",
        "fracnb.io/gpu-fraction": fraction,
    }
    labels = {"fracnb.io/slot-kind": kind, "component": "singleuser-server"}
    return {"metadata": {"name": f"jupyter-{user}", "annotations": annotations, "labels": labels}, "spec": spec,
            "status": {"phase": "Running" if node_name else "Pending"}}  # fmt: skip


def on_kueues_gate(waiting: dict) -> dict:
    waiting["spec"]["schedulingGates"] = [{"name": KUEUE_ADMISSION_GATE}]
    return waiting


def demo_config(**spawner) -> Config:
    config = Config()
    config.FractionalSpawner.gpu_backend = "time-slicing"
    config.FractionalSpawner.gpu_memory = "80Gi"
    config.FractionalSpawner.profile_list = PROFILES
    config.KubeSpawner.node_selector = {"fracnb.io/runner": "local"}
    for key, value in spawner.items():
        config.FractionalSpawner[key] = value
    return config


def test_the_choices_and_slot_kinds_have_the_names_users_see() -> None:
    choices = hub_choices(demo_config())
    assert [c.name for c in choices.choices] == [
        "CPU only",
        "0.25 GPU",
        "Small GPU memory",
        "0.25 GPU, one slot",
        "1/2 GPU",
    ]
    assert choices.profile_name("quarter") == "0.25 GPU"
    assert choices.profile_name("gone") == "gone"  # a profile the list no longer has
    kind = "nvidia.com-gpu.shared.local.4.time-slicing"
    assert choices.kind_name(kind) == "0.25 GPU (time-slicing)"
    assert [c.name for c in choices.kinds()[kind]] == ["0.25 GPU", "Small GPU memory"]
    assert hub_choices(demo_config(profile_list=lambda spawner: PROFILES)).choices == ()


def test_capacity_is_counted_per_slot_kind_on_the_selected_nodes_in_gpu_shares() -> None:
    kind = "nvidia.com-gpu.shared.local.4.time-slicing"
    nodes = [
        sliced("local-0", 4, 1, local=True),  # the demo's local A100, sliced 4 ways
        sliced("kwok-ts4", 4, 8, local=False),  # 32 replicas the local profiles cannot use
        sliced("kwok-ts8", 8, 8, local=False),  # another kind altogether
        sliced("local-mps", 4, 1, local=True, strategy="mps"),
    ]
    pods = [
        pod("ann", kind),
        pod("bob", kind),
        pod("carol", kind, node_name=None, queued=True),
        on_kueues_gate(pod("dave", kind, node_name=None)),  # waits too, for its team's quota (the kueue engine)
        {"metadata": {"name": "batch"}, "spec": {"nodeName": "local-0", "containers": [
            {"resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}]}, "status": {"phase": "Running"}},
    ]  # fmt: skip
    use, mps = slot_kind_uses(hub_choices(demo_config()), nodes, pods)
    assert (mps.what, mps.choices, shares_text(mps.gpus), mps.free_servers) == (
        "0.25 GPU (mps)", ("0.25 GPU, one slot",), "1 GPU", 4
    )  # fmt: skip
    assert (use.what, use.choices, use.product, use.nodes) == (
        "0.25 GPU (time-slicing)", ("0.25 GPU", "Small GPU memory"), "NVIDIA-A100-SXM4-80GB", 1,
    )  # fmt: skip
    assert [shares_text(x) for x in (use.gpus, use.in_use, use.waiting, use.free)] == [
        "1 GPU", "0.75 GPU", "0.5 GPU", "0.25 GPU"
    ]  # fmt: skip
    assert use.free_servers == 1


def test_hami_split_units_are_not_whole_gpus() -> None:
    profiles = [{"display_name": "HAMi quarter", "slug": "hq", "gpu": {"fraction": 0.25, "backend": "hami"}}]
    config = demo_config(profile_list=profiles)
    config.KubeSpawner.node_selector = {}
    hami = node("hami", {"gpu": "on", "nvidia.com/gpu.count": "8"}, {"nvidia.com/gpu": "80"})
    uses = slot_kind_uses(hub_choices(config), [hami], [])
    assert [(u.what, shares_text(u.gpus), shares_text(u.free)) for u in uses] == [
        ("0.25 GPU (hami)", "8 GPUs", "8 GPUs")
    ]


def test_waiting_servers_are_said_to_wait() -> None:
    kind = "k"
    pods = [pod("ann", kind), pod("bob", kind, node_name=None, queued=True)]
    allocations = allocations_from_pods(pods)
    assert [a.waiting for a in allocations] == [False, True]
    groups, users = use_rows(allocations, QuotaPolicy(groups={"team-a": Fraction(1, 2)}), {"team-a": ["ann", "bob"]})
    assert [(g.name, g.used_text) for g in groups] == [("team-a", "0.25 GPU + 0.25 GPU (waiting)")]
    assert [(u.name, u.used_text) for u in users] == [("ann", "0.25 GPU"), ("bob", "0.25 GPU (waiting)")]
    policy = QuotaPolicy(groups={"team-a": Fraction(1, 2)})
    refused = check_request(policy, allocations, user="carol", groups={"team-a": ["ann", "bob", "carol"]},
                            server="", fraction=Fraction(1, 4))  # fmt: skip
    assert refused.message == "team-a uses 0.25 GPU + 0.25 GPU (waiting) of 0.5 GPU; this choice needs 0.25 GPU"
    line = quota_line(check_request(policy, allocations, user="bob", groups={"team-a": ["ann", "bob"]}, server="x",
                                    fraction=Fraction(0)))  # fmt: skip
    assert line == "team-a (your team, together): 0.25 GPU + 0.25 GPU (waiting) of 0.5 GPU in use"
    assert held_words(Fraction(1, 2)) == "0.5 GPU"
