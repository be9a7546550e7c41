"""Objects a backend creates beside the pod (``PodFields.companions``), and the pod's claims on them.

Today these are the ``dra`` backend's ResourceClaimTemplates, one per server, named after the
pod. The spawner creates them before the pod, makes the pod their owner once it exists (so the
garbage collector removes them with the pod even if the hub never stops the server), and deletes
them at stop; their names are in the spawner's state, so a restarted hub deletes them too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes_asyncio.client import CoreV1ResourceClaim, ResourceV1Api, V1PodResourceClaim
from kubernetes_asyncio.client.exceptions import ApiException

from fracnb_spawner.gpu.backends import PodFields

# kind -> the ResourceV1Api methods that create, patch and delete one namespaced object of it.
_CALLS = {
    "ResourceClaimTemplate": (
        "create_namespaced_resource_claim_template",
        "patch_namespaced_resource_claim_template",
        "delete_namespaced_resource_claim_template",
    ),
}
# What the hub does to them: create (replacing a leftover: delete), make the pod their owner (patch), delete.
TEMPLATE_VERBS = ("get", "create", "patch", "delete")


def rbac_hint(kind: str, namespace: str) -> str:
    """The rule the hub's service account lacks when the apiserver answers 403 about ``kind`` objects."""
    resource = kind.lower() + "s"
    return (
        f"the hub's service account needs the RBAC rule apiGroups [resource.k8s.io], resources [{resource}], "
        f"verbs [{', '.join(TEMPLATE_VERBS)}] in namespace {namespace!r}: apply the ClusterRole fracnb-hub-dra "
        "of helm-values/rbac.yaml with its binding to the hub's service account (docs/spawner.md)"
    )


class CompanionError(RuntimeError):
    """A companion object could not be created; the message names it and the likely fix."""


def references(objects: Iterable[Mapping[str, Any]], namespace: str) -> list[dict[str, str]]:
    """What the spawner keeps in its state to find the objects again: kind, namespace and name."""
    return [{"kind": obj["kind"], "namespace": namespace, "name": obj["metadata"]["name"]} for obj in objects]


def attach_claims(pod: Any, fields: PodFields) -> None:
    """Add the fields' ``spec.resourceClaims`` and the notebook container's ``resources.claims`` to ``pod``."""
    if not fields.pod_claims:
        return
    pod.spec.resource_claims = [*(pod.spec.resource_claims or [])] + [
        V1PodResourceClaim(name=claim["name"], resource_claim_template_name=claim.get("resourceClaimTemplateName"))
        for claim in fields.pod_claims
    ]
    resources = pod.spec.containers[0].resources
    resources.claims = [*(resources.claims or [])] + [
        CoreV1ResourceClaim(name=claim["name"]) for claim in fields.container_claims
    ]


async def create(api_client: Any, namespace: str, objects: Iterable[Mapping[str, Any]], log: Any) -> None:
    """Create each object in ``namespace``, replacing one of the same name left by an earlier start."""
    api = ResourceV1Api(api_client)
    for obj in objects:
        create_call, _patch, delete_call = _CALLS[obj["kind"]]
        name = obj["metadata"]["name"]
        try:
            try:
                await getattr(api, create_call)(namespace, obj)
            except ApiException as error:
                if error.status != 409:
                    raise
                # Left over from a start whose stop never ran; this spawn's choice may differ.
                log.info("fracnb: replacing the leftover %s %s/%s", obj["kind"], namespace, name)
                await getattr(api, delete_call)(name, namespace)
                await getattr(api, create_call)(namespace, obj)
        except ApiException as error:
            hint = f"; {rbac_hint(obj['kind'], namespace)}" if error.status == 403 else ""
            raise CompanionError(
                f"the hub could not create {obj['kind']} {namespace}/{name} ({error.status} {error.reason}){hint}"
            ) from error


async def adopt(api_client: Any, refs: Iterable[Mapping[str, str]], owner: Mapping[str, Any], log: Any) -> None:
    """Make the pod (``owner``, an ownerReference) own each object; a failure only costs the fallback."""
    api = ResourceV1Api(api_client)
    for ref in refs:
        _create, patch_call, _delete = _CALLS[ref["kind"]]
        try:
            body = {"metadata": {"ownerReferences": [owner]}}
            await getattr(api, patch_call)(
                ref["name"], ref["namespace"], body, _content_type="application/merge-patch+json"
            )
        except ApiException as error:
            hint = f"; {rbac_hint(ref['kind'], ref['namespace'])}" if error.status == 403 else ""
            log.warning(
                "fracnb: could not make the pod own %s %s (%s %s), so only the stop deletes it%s",
                ref["kind"], ref["name"], error.status, error.reason, hint,
            )  # fmt: skip


async def delete(api_client: Any, refs: Iterable[Mapping[str, str]], log: Any) -> None:
    """Delete each object; one already gone is fine, and no failure here fails the stop."""
    api = ResourceV1Api(api_client)
    for ref in refs:
        _create, _patch, delete_call = _CALLS.get(ref.get("kind", ""), (None, None, None))
        if delete_call is None:
            continue
        try:
            await getattr(api, delete_call)(ref["name"], ref["namespace"])
        except ApiException as error:
            if error.status != 404:
                log.warning("fracnb: could not delete %s %s/%s: %s", ref["kind"], ref["namespace"], ref["name"], error)


def owner_reference(pod: Mapping[str, Any]) -> dict[str, Any]:
    """An ownerReference to ``pod`` (a pod as the reflector keeps it)."""
    metadata = pod["metadata"]
    return {"apiVersion": "v1", "kind": "Pod", "name": metadata["name"], "uid": metadata["uid"]}
