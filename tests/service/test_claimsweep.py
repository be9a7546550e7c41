"""Which ResourceClaims the fracnb service's sweep settles (pure; tests/spawner_k8s/test_dra_sweep.py runs it on
the real control plane)."""

from __future__ import annotations

from datetime import datetime, timezone

from fracnb_spawner.service.claimsweep import refers_to, unowned_past_grace

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc)


def claim(created: str = "2026-11-28T11:50:00Z", **metadata: object) -> dict:
    base = {"name": "jupyter-ann-gpu", "annotations": {"fracnb.io/pod": "jupyter-ann"}, "creationTimestamp": created}
    return {"metadata": {**base, **metadata}}


def test_an_unowned_claim_of_the_hub_past_its_grace_names_its_pod() -> None:
    assert unowned_past_grace(claim(), NOW, grace=300) == "jupyter-ann"
    assert unowned_past_grace(claim("2026-11-28T11:50:00+00:00"), NOW, grace=600) == "jupyter-ann"


def test_young_owned_leaving_or_foreign_claims_are_left_alone() -> None:
    assert unowned_past_grace(claim("2026-11-28T11:58:00Z"), NOW, grace=300) is None  # within the grace period
    owned = claim(ownerReferences=[{"kind": "Pod", "name": "jupyter-ann", "uid": "u"}])
    assert unowned_past_grace(owned, NOW, grace=300) is None
    assert unowned_past_grace(claim(deletionTimestamp="2026-11-28T11:59:00Z"), NOW, grace=300) is None
    assert unowned_past_grace(claim(annotations={}), NOW, grace=300) is None  # not one the hub made for a server


def test_a_pod_refers_to_a_claim_by_its_resource_claim_name() -> None:
    pod = {"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "jupyter-ann-gpu"}]}}
    assert refers_to(pod, "jupyter-ann-gpu")
    assert not refers_to(pod, "jupyter-bob-gpu")
    assert not refers_to({"spec": {}}, "jupyter-ann-gpu")
