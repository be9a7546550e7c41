"""The fracnb service's sweep of ResourceClaims the hub made and never gave an owner.

The hub creates a ``dra`` server's claim together with its pod and patches the pod in as the claim's
owner afterwards (:mod:`fracnb_spawner.gpu.companions`). A hub dying in between leaves a claim that the
garbage collector will never remove. Each pass lists fracnb's claims (by their ``fracnb.io/gpu-backend``
label), and for each one without owner, annotated with its pod's name and older than the grace period:
gives it its pod as owner if that pod exists and refers to it, else deletes it. Both requests carry the
claim's uid and resourceVersion as preconditions, so a claim the hub adopted or replaced meanwhile is
left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from fracnb_spawner.common.podkeys import BACKEND_LABEL, CLAIM_POD_ANNOTATION
from fracnb_spawner.gpu.companions import MERGE_PATCH, owner_reference

log = logging.getLogger("fracnb.service")


@dataclass
class SweepReport:
    adopted: list[str] = field(default_factory=list)  # "namespace/claim", now owned by their pod
    deleted: list[str] = field(default_factory=list)  # "namespace/claim", whose pod is gone


def unowned_past_grace(claim: Mapping[str, Any], now: datetime, grace: float) -> str | None:
    """The pod's name if ``claim`` is one the hub made, has no owner, and is older than ``grace`` seconds."""
    metadata = claim.get("metadata") or {}
    pod = (metadata.get("annotations") or {}).get(CLAIM_POD_ANNOTATION)
    created = metadata.get("creationTimestamp")
    if not pod or metadata.get("ownerReferences") or metadata.get("deletionTimestamp") or not created:
        return None
    born = created if isinstance(created, datetime) else datetime.fromisoformat(str(created).replace("Z", "+00:00"))
    return pod if now - born >= timedelta(seconds=grace) else None


def refers_to(pod: Mapping[str, Any], claim_name: str) -> bool:
    """Whether ``pod`` uses the claim named ``claim_name`` (``spec.resourceClaims[].resourceClaimName``)."""
    return any(
        ref.get("resourceClaimName") == claim_name for ref in (pod.get("spec") or {}).get("resourceClaims") or []
    )


async def sweep_claims(api_client: Any, namespace: str | None, now: datetime, grace: float) -> SweepReport:
    """One pass over fracnb's claims in ``namespace`` (None: every namespace)."""
    from kubernetes_asyncio.client import CoreV1Api, ResourceV1Api  # noqa: PLC0415 -- hub extra only

    resource, core = ResourceV1Api(api_client), CoreV1Api(api_client)
    if namespace is None:
        listed = await resource.list_resource_claim_for_all_namespaces(label_selector=BACKEND_LABEL)
    else:
        listed = await resource.list_namespaced_resource_claim(namespace, label_selector=BACKEND_LABEL)
    report = SweepReport()
    for claim in api_client.sanitize_for_serialization(listed).get("items") or []:
        pod_name = unowned_past_grace(claim, now, grace)
        if pod_name is not None:
            await _settle(resource, core, claim, pod_name, report)
    return report


async def _settle(resource: Any, core: Any, claim: Mapping[str, Any], pod_name: str, report: SweepReport) -> None:
    from kubernetes_asyncio.client import V1DeleteOptions, V1Preconditions  # noqa: PLC0415 -- hub extra only
    from kubernetes_asyncio.client.exceptions import ApiException  # noqa: PLC0415

    metadata = claim["metadata"]
    name, namespace, version = metadata["name"], metadata["namespace"], metadata["resourceVersion"]
    try:
        pod = core.api_client.sanitize_for_serialization(await core.read_namespaced_pod(pod_name, namespace))
    except ApiException as error:
        if error.status != 404:
            raise
        pod = None
    try:
        if pod is not None and refers_to(pod, name):
            patch = {"metadata": {"resourceVersion": version, "ownerReferences": [owner_reference(pod)]}}
            await resource.patch_namespaced_resource_claim(name, namespace, patch, _content_type=MERGE_PATCH)
            report.adopted.append(f"{namespace}/{name}")
        else:
            preconditions = V1Preconditions(uid=metadata["uid"], resource_version=version)
            await resource.delete_namespaced_resource_claim(
                name, namespace, body=V1DeleteOptions(preconditions=preconditions)
            )
            report.deleted.append(f"{namespace}/{name}")
    except ApiException as error:
        if error.status not in (404, 409):  # gone, or changed (adopted, replaced) since the list: next pass
            raise
