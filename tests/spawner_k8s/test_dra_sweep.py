"""What a hub dying between a dra server's claim and its owner's patch leaves, on the real control plane:
the fracnb service's sweep gives a claim without owner its pod, or deletes it when its pod is gone,
leaving young claims and owned ones alone; and the next start of that server replaces such a claim."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from fracnb_spawner.service.claimsweep import sweep_claims
from fracnb_testbed.procs import wait_until_async
from tests.spawner_k8s.dra import allocation_of, claims_in, create_claim

pytestmark = pytest.mark.k8s

WHOLE_GPU = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}


def fracnb_claim(name: str, pod: str, owner: dict | None = None) -> dict:
    """A claim as the hub makes one (labelled and annotated as fracnb's), without owner unless given."""
    metadata = {
        "name": name,
        "labels": {"fracnb.io/gpu-backend": "dra"},
        "annotations": {"fracnb.io/pod": pod},
        "finalizers": ["resource.kubernetes.io/delete-protection"],
    }
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": metadata, "spec": WHOLE_GPU}


def pod_using(name: str, claim: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulingGates": [{"name": "test.example/hold"}],  # never scheduled: only its ownership matters
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "containers": [{"name": "c", "image": "example.invalid/c", "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }


def by_name(testbed, namespace: str) -> dict[str, dict]:
    return {claim["metadata"]["name"]: claim for claim in claims_in(testbed, namespace)}


async def test_the_sweep_gives_a_claim_its_pod_or_deletes_it_when_the_pod_is_gone(dra_testbed, dra_namespace) -> None:
    living = dra_testbed.create_pod(dra_namespace, pod_using("jupyter-living", "jupyter-living-gpu"))
    create_claim(dra_testbed, dra_namespace, fracnb_claim("jupyter-living-gpu", "jupyter-living"))
    create_claim(dra_testbed, dra_namespace, fracnb_claim("jupyter-gone-gpu", "jupyter-gone"))
    # A pod of the same name that does not use the claim (a later start's, of another design) does not adopt it.
    dra_testbed.create_pod(dra_namespace, pod_using("jupyter-other", "something-else"))
    create_claim(dra_testbed, dra_namespace, fracnb_claim("jupyter-other-gpu", "jupyter-other"))
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "jupyter-living", "uid": living["metadata"]["uid"]}
    create_claim(dra_testbed, dra_namespace, fracnb_claim("jupyter-owned-gpu", "jupyter-owned", owner))
    now = datetime.now(timezone.utc)
    async with dra_testbed.api_client() as api:
        young = await sweep_claims(api, dra_namespace, now, grace=3600)
        assert (young.adopted, young.deleted) == ([], []), "within the grace period nothing is touched"
        report = await sweep_claims(api, dra_namespace, now + timedelta(seconds=3600), grace=3600)
    assert report.adopted == [f"{dra_namespace}/jupyter-living-gpu"]
    assert sorted(report.deleted) == [f"{dra_namespace}/jupyter-gone-gpu", f"{dra_namespace}/jupyter-other-gpu"]
    claims = by_name(dra_testbed, dra_namespace)
    assert [ref["uid"] for ref in claims["jupyter-living-gpu"]["metadata"]["ownerReferences"]] == [
        living["metadata"]["uid"]
    ]
    assert claims["jupyter-owned-gpu"]["metadata"]["ownerReferences"] == [owner]
    # The deleted ones go once kube-controller-manager lifts the finalizer (nothing holds them).
    await wait_until_async(
        lambda: set(by_name(dra_testbed, dra_namespace)) == {"jupyter-living-gpu", "jupyter-owned-gpu"},
        what="the claims whose pod is gone to be deleted",
        timeout=30,
    )
    # Adopted: the garbage collector now removes the claim with its pod.
    dra_testbed.delete_pod(dra_namespace, "jupyter-living")
    await wait_until_async(
        lambda: claims_in(dra_testbed, dra_namespace) == [], what="the adopted claim to go with its pod", timeout=60
    )


async def test_a_claim_left_without_owner_is_replaced_by_the_next_start(
    dra_spawner, dra_testbed, dra_namespace
) -> None:
    spawner = dra_spawner({"profile": "any-quarter"}, user="orphan")
    # A hub died after creating the claim (asking for a whole GPU then) and before the pod.
    left = create_claim(dra_testbed, dra_namespace, fracnb_claim(f"{spawner.pod_name}-gpu", spawner.pod_name))
    await spawner.start()
    (claim,) = claims_in(dra_testbed, dra_namespace)
    (pod,) = [p for p in dra_testbed.list_pods(dra_namespace) if p["metadata"]["name"] == spawner.pod_name]
    assert claim["metadata"]["uid"] != left["metadata"]["uid"]
    assert [ref["uid"] for ref in claim["metadata"]["ownerReferences"]] == [pod["metadata"]["uid"]]
    assert allocation_of(dra_testbed, dra_namespace, spawner.pod_name)["consumedCapacity"] == {"memory": "20Gi"}
    await spawner.stop()
    await wait_until_async(
        lambda: claims_in(dra_testbed, dra_namespace) == [], what="the claim to go at stop", timeout=30
    )


async def test_a_server_started_again_right_after_its_stop_gets_a_claim_of_its_own(
    dra_spawner, dra_testbed, dra_namespace
) -> None:
    """The stop's claim may still be held by its finalizer (kube-controller-manager frees it once the pod is
    gone): the next start waits for the name, then makes its own."""
    spawner = dra_spawner({"profile": "any-quarter"}, user="again")
    await spawner.start()
    (first,) = claims_in(dra_testbed, dra_namespace)
    await spawner.stop()
    await spawner.start()
    (claim,) = [c for c in claims_in(dra_testbed, dra_namespace) if not c["metadata"].get("deletionTimestamp")]
    (pod,) = [p for p in dra_testbed.list_pods(dra_namespace) if p["metadata"]["name"] == spawner.pod_name]
    assert claim["metadata"]["uid"] != first["metadata"]["uid"]
    assert [ref["uid"] for ref in claim["metadata"]["ownerReferences"]] == [pod["metadata"]["uid"]]
    assert allocation_of(dra_testbed, dra_namespace, spawner.pod_name)["consumedCapacity"] == {"memory": "20Gi"}
    await spawner.stop()
    await wait_until_async(
        lambda: claims_in(dra_testbed, dra_namespace) == [], what="the claim to go at stop", timeout=30
    )
