"""Adaptive placement on the testbed's ``dra`` cluster (one A100 and one H100, each shared by memory), with
the real kube-scheduler allocating the claims: a new share goes beside the holder least likely to be busy
(from the session history), and onto the fuller card while a whole-card start waits."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from traitlets.config import Config

from fracnb_spawner.common.podkeys import BUSY_SINCE_ANNOTATION, PLACEMENT_ANNOTATION, QUEUE_GATE
from fracnb_spawner.history import db, store
from fracnb_spawner.hubstate import HubState
from fracnb_testbed.procs import wait_until_async
from tests.history.records import report
from tests.spawner_k8s.dra import A100, allocation_of, claims_in, claims_owned_by, create_claim

pytestmark = pytest.mark.k8s

H100 = "NVIDIA-H100-80GB-HBM3"
PROFILES = [
    {"display_name": "A100 quarter", "slug": "a100", "gpu": {"fraction": 0.25, "backend": "dra", "product": A100}},
    {"display_name": "H100 quarter", "slug": "h100", "gpu": {"fraction": 0.25, "backend": "dra", "product": H100}},
    {"display_name": "Any quarter", "slug": "any", "gpu": {"fraction": 0.25, "backend": "dra"}},
    {"display_name": "Whole GPU", "slug": "whole", "gpu": {"count": 1, "backend": "dra"}, "queue": {"max_wait": 120}},
]  # fmt: skip


def history_with(tmp_path: Path, busy_shares: dict[str, float]) -> str:
    """A session history in which each user spent that share of a long session busy."""
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    factory = db.open_database(url)
    for number, (user, share) in enumerate(busy_shares.items()):
        reported = "2099-01-01T00:00:00Z"  # within any window placement reads
        store.store_report(
            factory, user, report(f"{number:032x}", started=reported, reported=reported, busy_share=share)
        )
    db.close(factory)
    return url


def placement_config(history_url: str, placement: str = "adaptive") -> Config:
    config = Config()
    config.FractionalSpawner.profile_list = PROFILES
    config.FractionalSpawner.right_sizing_db_url = history_url
    config.FractionalSpawner.start_timeout = 60
    if placement != "adaptive":
        config.FractionalSpawner.placement = placement
    return config


async def started(dra_spawner, profile: str, user: str, config: Config):
    spawner = dra_spawner({"profile": profile}, user=user, config=Config(config))
    await spawner.start()
    return spawner


async def hub_sees_claims(count: int) -> None:
    """The hub's watch has the allocated claims of the servers started so far (it reads them as they come)."""
    view = HubState.current().watches.device_view()
    await wait_until_async(
        lambda: len(view.claims.objects()) >= count, what=f"{count} claims in the hub's view", timeout=30
    )


def uuid_of(testbed, node: str) -> str:
    """The uuid the node's one GPU publishes (as NVIDIA's DRA driver does)."""
    slices = testbed.get("/apis/resource.k8s.io/v1/resourceslices")["items"]
    (device,) = [d for s in slices if s["spec"].get("nodeName") == node for d in s["spec"]["devices"]]
    return device["attributes"]["uuid"]["string"]


def pod_annotations(testbed, namespace: str, name: str) -> dict:
    pod = next(p for p in testbed.list_pods(namespace) if p["metadata"]["name"] == name)
    return pod["metadata"].get("annotations") or {}


async def test_the_next_share_goes_beside_the_idle_notebook_not_the_busy_one(
    dra_spawner, dra_testbed, dra_namespace, tmp_path, caplog
) -> None:
    config = placement_config(history_with(tmp_path, {"busy": 0.9, "idle": 0.05}))
    busy = await started(dra_spawner, "a100", "busy", config)
    idle = await started(dra_spawner, "h100", "idle", config)
    await hub_sees_claims(2)
    carol = dra_spawner({"profile": "any"}, user="carol", config=Config(config))
    carol.log = logging.getLogger("fracnb-test-hub")  # the hub's log, as JupyterHub gives it
    caplog.set_level(logging.INFO, logger="fracnb-test-hub")
    await carol.start()
    result = allocation_of(dra_testbed, dra_namespace, carol.pod_name)
    assert (result["pool"], result["request"]) == ("h100-dra-0", "gpu/card-0")
    reason = (
        "card 0 of h100-dra-0: 0.1 busy expected of 1 holder (from their busy time), the least busy of 2 cards "
        "that fit; nothing waits for whole cards"
    )
    assert pod_annotations(dra_testbed, dra_namespace, carol.pod_name)[PLACEMENT_ANNOTATION] == reason
    assert f"fracnb: placing {carol.pod_name} (placement adaptive): {reason}" in caplog.messages
    (claim,) = claims_owned_by(dra_testbed, dra_namespace, carol.pod_name)
    ranked = claim["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert [sub["name"] for sub in ranked] == ["card-0", "card-1", "any"]  # both cards ranked, then any card
    assert uuid_of(dra_testbed, "h100-dra-0") in ranked[0]["selectors"][-1]["cel"]["expression"]
    assert uuid_of(dra_testbed, "a100-dra-0") in ranked[1]["selectors"][-1]["cel"]["expression"]
    for spawner in (busy, idle, carol):
        await spawner.stop()
    await wait_until_async(lambda: claims_in(dra_testbed, dra_namespace) == [], what="the claims to go", timeout=30)


async def test_while_a_whole_card_start_waits_the_next_share_goes_to_the_fuller_card(
    dra_spawner, dra_testbed, dra_namespace, tmp_path
) -> None:
    config = placement_config(history_with(tmp_path, {"ann": 0.4, "bob": 0.4, "cat": 0.0}))
    holders = [
        await started(dra_spawner, "h100", "ann", config),
        await started(dra_spawner, "h100", "bob", config),
        await started(dra_spawner, "a100", "cat", config),
    ]
    whole = dra_spawner({"profile": "whole"}, user="wanda", config=Config(config))
    waiting = asyncio.ensure_future(whole.start())

    def whole_is_gated() -> bool:
        pods = [p for p in dra_testbed.list_pods(dra_namespace) if p["metadata"]["name"] == whole.pod_name]
        return bool(pods) and QUEUE_GATE in [g["name"] for g in pods[0]["spec"].get("schedulingGates") or []]

    await wait_until_async(whole_is_gated, what="the whole-card start to wait in the queue", timeout=30)
    await hub_sees_claims(3)

    async def hub_sees_the_waiting_pod() -> bool:
        cluster = await HubState.current().watches.read(devices=False, wait=False)
        return cluster is not None and whole.pod_name in [p["metadata"]["name"] for p in cluster.pods]

    await wait_until_async(hub_sees_the_waiting_pod, what="the waiting pod in the hub's view", timeout=30)
    # Spread would take the A100 (one idle holder); a whole card comes free sooner if the H100 takes it
    # (its holders are expected 0.8 busy together: under one card's worth, so packing does not pass it over).
    dan = dra_spawner({"profile": "any"}, user="dan", config=Config(config))
    dan_starting = asyncio.ensure_future(dan.start())

    def dans_placement() -> str | None:
        pods = [p for p in dra_testbed.list_pods(dra_namespace) if p["metadata"]["name"] == dan.pod_name]
        return pods[0]["metadata"].get("annotations", {}).get(PLACEMENT_ANNOTATION) if pods else None

    # Dan queues behind the whole-card start, his share already placed; once it gives up, his turn comes.
    await wait_until_async(dans_placement, what="dan's pod with its placement", timeout=30)
    reason = dans_placement()
    assert reason.startswith("card 0 of h100-dra-0: the fullest of 2 cards that fit (40 GiB of 80 GiB taken")
    assert reason.endswith(f"a whole-card start ({whole.pod_name}) waits for whole cards")
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    await whole.stop()
    await asyncio.wait_for(dan_starting, timeout=60)
    assert allocation_of(dra_testbed, dra_namespace, dan.pod_name)["pool"] == "h100-dra-0"
    for spawner in (*holders, dan):
        await spawner.stop()
    await wait_until_async(lambda: claims_in(dra_testbed, dra_namespace) == [], what="the claims to go", timeout=30)


async def test_packed_puts_the_share_beside_the_busy_holders_and_spread_does_not(
    dra_spawner, dra_testbed, dra_namespace, tmp_path
) -> None:
    history = history_with(tmp_path, {"ann": 0.4, "bob": 0.4, "cat": 0.0})
    holders = [
        await started(dra_spawner, "h100", "ann", placement_config(history)),
        await started(dra_spawner, "h100", "bob", placement_config(history)),
        await started(dra_spawner, "a100", "cat", placement_config(history)),
    ]
    await hub_sees_claims(3)
    packed = await started(dra_spawner, "any", "pat", placement_config(history, "packed"))
    assert allocation_of(dra_testbed, dra_namespace, packed.pod_name)["pool"] == "h100-dra-0"
    await hub_sees_claims(4)
    spread = await started(dra_spawner, "any", "sam", placement_config(history, "spread"))
    assert allocation_of(dra_testbed, dra_namespace, spread.pod_name)["pool"] == "a100-dra-0"
    for spawner in (*holders, packed, spread):
        await spawner.stop()
    await wait_until_async(lambda: claims_in(dra_testbed, dra_namespace) == [], what="the claims to go", timeout=30)


async def test_while_a_batch_pods_whole_card_claim_waits_the_next_share_goes_to_the_fuller_card(
    dra_spawner, dra_testbed, dra_namespace, tmp_path
) -> None:
    """Not a start of fracnb's: a training pod's claim of 2 whole GPUs, which no node of two one-GPU nodes can
    allocate, waits; the hub's view keeps it (claims of every namespace), and packing answers it."""
    config = placement_config(history_with(tmp_path, {"ann": 0.4, "bob": 0.4, "cat": 0.0}))
    holders = [
        await started(dra_spawner, "h100", "ann", config),
        await started(dra_spawner, "h100", "bob", config),
        await started(dra_spawner, "a100", "cat", config),
    ]
    await hub_sees_claims(3)
    job = dra_testbed.create_pod(dra_namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-0"},
        "spec": {"resourceClaims": [{"name": "gpus", "resourceClaimName": "train-0-gpus"}],
                 "containers": [{"name": "job", "image": "example.invalid/train", "resources": {"claims": [{"name": "gpus"}]}}]},
    })  # fmt: skip
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "train-0", "uid": job["metadata"]["uid"]}
    whole = {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2}
    create_claim(dra_testbed, dra_namespace, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "train-0-gpus", "ownerReferences": [owner]},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": whole}]}},
    })  # fmt: skip
    view = HubState.current().watches.device_view()
    await wait_until_async(
        lambda: any(c.get("waits_for") for c in view.claims.objects()),
        what="the waiting claim in the hub's view",
        timeout=30,
    )
    dan = await started(dra_spawner, "any", "dan", config)
    reason = pod_annotations(dra_testbed, dra_namespace, dan.pod_name)[PLACEMENT_ANNOTATION]
    assert reason.startswith("card 0 of h100-dra-0: the fullest of 2 cards that fit"), reason
    assert reason.endswith(f"a whole-card batch claim ({dra_namespace}/train-0-gpus) waits for whole cards")
    assert allocation_of(dra_testbed, dra_namespace, dan.pod_name)["pool"] == "h100-dra-0"
    dra_testbed.delete_pod(dra_namespace, "train-0", grace_seconds=0)
    rest = dra_testbed.rest()
    try:
        rest.request("DELETE", f"/apis/resource.k8s.io/v1/namespaces/{dra_namespace}/resourceclaims/train-0-gpus")
    finally:
        rest.close()
    for spawner in (*holders, dan):
        await spawner.stop()
    await wait_until_async(lambda: claims_in(dra_testbed, dra_namespace) == [], what="the claims to go", timeout=30)


async def test_with_equal_histories_the_next_share_goes_beside_the_holder_not_busy_now(
    dra_spawner, dra_testbed, dra_namespace, tmp_path
) -> None:
    """Both holders as busy by their history; the fracnb service has marked ann's pod busy for 10 minutes (a long
    cell): the next share goes beside bob. Unmarked, the tie would go to the A100 by its name."""
    config = placement_config(history_with(tmp_path, {"ann": 0.4, "bob": 0.4}))
    ann = await started(dra_spawner, "a100", "ann", config)
    bob = await started(dra_spawner, "h100", "bob", config)
    await hub_sees_claims(2)
    since = (datetime.now(timezone.utc) - timedelta(minutes=10)).isoformat().replace("+00:00", "Z")
    dra_testbed.patch_pod(dra_namespace, ann.pod_name, {"metadata": {"annotations": {BUSY_SINCE_ANNOTATION: since}}})

    async def hub_sees_the_mark() -> bool:
        cluster = await HubState.current().watches.read(devices=False, wait=False)
        pods = cluster.pods if cluster is not None else []
        return any((p["metadata"].get("annotations") or {}).get(BUSY_SINCE_ANNOTATION) == since for p in pods)

    await wait_until_async(hub_sees_the_mark, what="the busy-since mark in the hub's view", timeout=30)
    carol = await started(dra_spawner, "any", "carol", config)
    assert allocation_of(dra_testbed, dra_namespace, carol.pod_name)["pool"] == "h100-dra-0"
    assert pod_annotations(dra_testbed, dra_namespace, carol.pod_name)[PLACEMENT_ANNOTATION] == (
        "card 0 of h100-dra-0: 0.4 busy expected of 1 holder (from their busy time), the least busy of 2 cards "
        "that fit; nothing waits for whole cards"
    )
    for spawner in (ann, bob, carol):
        await spawner.stop()
    await wait_until_async(lambda: claims_in(dra_testbed, dra_namespace) == [], what="the claims to go", timeout=30)
