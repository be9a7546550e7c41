"""Reading the ``dra`` cluster's claims and claim templates, for the tests of the dra backend."""

from __future__ import annotations

from fracnb_testbed.procs import wait_until_async

A100 = "NVIDIA-A100-SXM4-80GB"  # as GPU Feature Discovery writes it; the dra cluster's devices say "NVIDIA A100-…"


def claims_in(testbed, namespace: str) -> list[dict]:
    return testbed.get(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims")["items"]


def create_claim(testbed, namespace: str, claim: dict) -> dict:
    rest = testbed.rest()
    try:
        status, answer = rest.request("POST", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims", claim)
    finally:
        rest.close()
    assert status == 201, answer
    return answer


def templates_in(testbed, namespace: str) -> list[dict]:
    return testbed.get(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates")["items"]


def claims_owned_by(testbed, namespace: str, pod_name: str) -> list[dict]:
    return [
        c for c in claims_in(testbed, namespace)
        if any(ref["name"] == pod_name for ref in c["metadata"].get("ownerReferences", []))
    ]  # fmt: skip


def allocation_of(testbed, namespace: str, pod_name: str) -> dict:
    """The device result of the claim the pod ``pod_name`` holds."""
    (claim,) = claims_owned_by(testbed, namespace, pod_name)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    return result


async def claim_allocated(testbed, namespace: str, pod_name: str, timeout: float = 30) -> None:
    """Wait until the claim the pod ``pod_name`` owns is allocated (kube-scheduler chose its device)."""
    await wait_until_async(
        lambda: any((c.get("status") or {}).get("allocation") for c in claims_owned_by(testbed, namespace, pod_name)),
        what=f"{pod_name}'s claim allocated",
        timeout=timeout,
    )
