"""Borrowing a training card, on the testbed's ``dra`` cluster (real kube-apiserver, kube-scheduler allocating
the claims): the A100 node is the development pool, the H100 node is marked borrowable
(``c.FractionalSpawner.borrowable_node_selector``). With the A100 held by a batch pod, a waiting notebook starts
on the H100, says it borrows, and nothing is evicted; with the H100 held by a batch pod too and reclaim off, the
notebook waits in the queue on its own pool and both batch pods keep their cards."""

from __future__ import annotations

import asyncio
import json

import pytest
from prometheus_client import CollectorRegistry
from traitlets.config import Config

from bench.reclaim import BATCH
from fracnb_spawner.borrowing.words import FORM_BORROWS, STARTING_BORROWED
from fracnb_spawner.common.podkeys import (
    BORROWABLE_ANNOTATION,
    BORROWED_FROM_ANNOTATION,
    BORROWED_LABEL,
    SLOT_KIND_LABEL,
)
from fracnb_spawner.reclaim.victims import Policy
from fracnb_spawner.service.choices import hub_choices
from fracnb_spawner.service.reclaiming import KubeReclaimApi, Reclaimer, ReclaimMetrics, want_from_choices
from fracnb_testbed.procs import wait_until_async
from tests.spawner_k8s.dra import allocation_of, claim_allocated
from tests.spawner_k8s.test_dra_queue import gated, pod_of, queued
from tests.spawner_k8s.test_reclaim import claim_template, holding

pytestmark = pytest.mark.k8s

DEVELOPMENT = {"kubernetes.io/hostname": "a100-dra-0"}
TRAINING = {"kubernetes.io/hostname": "h100-dra-0"}


def borrowing_config() -> Config:
    config = Config()
    config.FractionalSpawner.profile_list = [
        {"display_name": "Quarter", "slug": "quarter", "gpu": {"fraction": 0.25, "backend": "dra"},
         "queue": {"max_wait": 120}},
    ]  # fmt: skip
    config.FractionalSpawner.node_selector = DEVELOPMENT
    config.FractionalSpawner.borrowable_node_selector = TRAINING
    config.FractionalSpawner.start_timeout = 60
    return config


def the_development_card_lent(testbed, namespace: str) -> asyncio.Future:
    claim_template(testbed, namespace, "whole-a100", None)
    return holding(testbed, namespace, "dev-train", "whole-a100")


async def the_training_card_held(testbed, namespace: str) -> None:
    """A batch pod on the H100: a whole device of any product, the A100 being taken already."""
    rest = testbed.rest()
    try:
        rest.create(
            f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates",
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "whole-any"},
             "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}}]}}}},
        )  # fmt: skip
    finally:
        rest.close()
    testbed.create_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train"},
        "spec": {
            "priorityClassName": BATCH, "nodeSelector": TRAINING,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "whole-any"}],
            "containers": [{"name": "train", "image": "train", "resources": {"claims": [{"name": "gpu"}]}}],
        },
    })  # fmt: skip
    await claim_allocated(testbed, namespace, "train")


async def form_says(spawner, text: str) -> None:
    """Wait until the spawn form's line under the choice says ``text`` (the form reads the hub's watch)."""

    async def said() -> bool:
        return text in await spawner.render_options_form()

    await wait_until_async(said, what=f"the form to say {text!r}", timeout=20, interval=0.1)


def kept(testbed, namespace: str, name: str) -> bool:
    """The batch pod still holds its card: there, bound, and not being deleted (evicted)."""
    pod = pod_of(testbed, namespace, name)
    return pod is not None and bool(pod["spec"].get("nodeName")) and not pod["metadata"].get("deletionTimestamp")


def on_the_training_card(testbed, namespace: str, spawner) -> dict:
    """The spawner's pod, asserted to run on the borrowed H100 as a borrower: bound there, selecting the training
    pool, its claim allocated there, labelled borrowed and annotated with the slot kind it borrowed from."""
    pod = pod_of(testbed, namespace, spawner.pod_name)
    assert pod["spec"]["nodeName"] == "h100-dra-0"
    assert pod["spec"]["nodeSelector"] == TRAINING
    assert allocation_of(testbed, namespace, spawner.pod_name)["pool"] == "h100-dra-0"
    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert labels[BORROWED_LABEL] == "true"
    assert annotations[BORROWED_FROM_ANNOTATION] == spawner.spawn_plan.ask.kind != labels[SLOT_KIND_LABEL]
    return pod


async def test_a_waiting_notebook_borrows_a_marked_training_card(
    dra_spawner, dra_testbed, dra_namespace, batch_namespace
) -> None:
    await the_development_card_lent(dra_testbed, batch_namespace)
    alice = dra_spawner({"profile": "quarter"}, user="alice", config=borrowing_config())
    await form_says(alice, FORM_BORROWS)
    assert (await asyncio.wait_for(alice.start(), 60)).startswith("http://")
    pod = on_the_training_card(dra_testbed, dra_namespace, alice)
    assert "priorityClassName" not in pod["spec"]
    assert not pod["spec"].get("priority")
    progress = alice.queue.progress(lambda: False)
    event = await asyncio.wait_for(anext(progress), 5)
    await progress.aclose()
    assert event["message"] == STARTING_BORROWED == "Starting on a training card: development cards are full"
    assert kept(dra_testbed, batch_namespace, "dev-train"), "borrowing evicts nothing"
    await alice.stop()


async def test_with_the_training_card_held_by_batch_and_no_reclaim_the_notebook_waits_and_nothing_is_evicted(
    dra_spawner, dra_testbed, dra_namespace, batch_namespace
) -> None:
    await the_development_card_lent(dra_testbed, batch_namespace)
    await the_training_card_held(dra_testbed, batch_namespace)
    bob = dra_spawner({"profile": "quarter"}, user="bob", config=borrowing_config())
    await form_says(bob, "queue: 0 waiting")
    assert FORM_BORROWS not in await bob.render_options_form()
    task = await queued(bob)
    await bob.hub_state.gpu_queue(bob.api, bob.log).reconcile()  # the queue has looked again since
    assert gated(dra_testbed, dra_namespace, bob.pod_name)
    pod = pod_of(dra_testbed, dra_namespace, bob.pod_name)
    assert not pod["spec"].get("nodeSelector"), "created to start on either pool: the two share no key"
    assert json.loads(pod["metadata"]["annotations"][BORROWABLE_ANNOTATION]) == TRAINING
    assert BORROWED_LABEL not in pod["metadata"]["labels"]
    assert bob.queue.borrowed is None
    assert kept(dra_testbed, batch_namespace, "dev-train")
    assert kept(dra_testbed, batch_namespace, "train")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await bob.stop()


def the_development_card_in_service(testbed, namespace: str) -> asyncio.Future:
    """The A100 held whole by a pod at the notebooks' priority (0): not reclaimable, so the development pool
    has no room to make."""
    claim_template(testbed, namespace, "whole-a100", None)
    testbed.create_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dev-service"},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "whole-a100"}],
            "containers": [{"name": "serve", "image": "serve", "resources": {"claims": [{"name": "gpu"}]}}],
        },
    })  # fmt: skip
    return claim_allocated(testbed, namespace, "dev-service")


async def test_with_reclaim_on_a_batch_pod_on_the_training_card_is_evicted_and_the_notebook_starts_there(
    dra_spawner, dra_testbed, dra_namespace, batch_namespace
) -> None:
    await the_development_card_in_service(dra_testbed, batch_namespace)
    await the_training_card_held(dra_testbed, batch_namespace)
    cy = dra_spawner({"profile": "quarter"}, user="cy", config=borrowing_config())
    task = await queued(cy)
    place = cy.queue.place
    async with dra_testbed.api_client() as api_client:
        want = want_from_choices(hub_choices(borrowing_config()))
        reclaim = Reclaimer(KubeReclaimApi(api_client), Policy(), 10, want, ReclaimMetrics(CollectorRegistry()))
        assert await reclaim.reclaim_pass() == [((batch_namespace, "train"), (dra_namespace, cy.pod_name), "evicted")]
    events = [e for e in dra_testbed.events_for(batch_namespace, "train") if e["reason"] == "Reclaimed"]
    assert [e["message"] for e in events] == ["reclaimed for a 0.25 GPU notebook of cy"]
    assert (await asyncio.wait_for(task, 60)).startswith("http://")
    on_the_training_card(dra_testbed, dra_namespace, cy)
    assert place.borrowed is cy.spawn_plan.borrow.ask, "the spawn knows it borrows (the progress page says so)"
    assert kept(dra_testbed, batch_namespace, "dev-service"), "only pods below the notebooks' priority are taken"
    await cy.stop()
