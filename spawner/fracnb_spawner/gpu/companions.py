"""Objects a backend creates beside the pod (``PodFields.companions``), and the pod's claims on them.

Today these are the ``dra`` backend's ResourceClaimTemplates, one per server, named after the
pod. The spawner creates them before the pod, makes the pod their owner once it exists (so the
garbage collector removes them with the pod even if the hub never stops the server), and deletes
them at stop; their names are in the spawner's state, so a restarted hub deletes them too.
:class:`Companions` holds that life cycle for one spawner.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes_asyncio.client import ResourceV1Api
from kubernetes_asyncio.client.exceptions import ApiException

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


class Companions:
    """One spawner's companion objects: those its plan wants, and those it created (by reference)."""

    def __init__(self) -> None:
        self.wanted: list[dict[str, Any]] = []
        self.refs: list[dict[str, str]] = []  # kept in the hub's state
        self.pending = False  # still to be created for the next pod

    def plan(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """This spawn's objects (named after its pod), created with the pod."""
        self.wanted = [dict(obj) for obj in objects]
        self.pending = bool(self.wanted)

    async def create(self, api_client: Any, namespace: str, log: Any) -> None:
        """Before the pod: replace what an earlier spawn left, once per pod creation."""
        if not self.pending:
            return
        await delete(api_client, self.refs, log)
        await create(api_client, namespace, self.wanted, log)
        self.refs = references(self.wanted, namespace)
        self.pending = False

    async def adopt(self, api: Any, pod_name: str, namespace: str, log: Any) -> None:
        """Make the pod just created their owner; a failure only leaves them to the stop."""
        if not self.refs:
            return
        try:
            # Read now, not from the reflector: a pod replaced during the start has a new uid.
            made = await api.read_namespaced_pod(pod_name, namespace)
        except ApiException as error:
            log.warning("fracnb: could not read %s to own its companions: %s", pod_name, error.reason)
            return
        await adopt(api.api_client, self.refs, owner_reference(api.api_client.sanitize_for_serialization(made)), log)

    async def remove(self, api_client: Any, log: Any) -> None:
        """At stop. KubeSpawner also stops a leftover pod in the middle of a start, then creates the pod
        again: its objects are made again too."""
        await delete(api_client, self.refs, log)
        self.refs = []
        self.pending = bool(self.wanted)

    def saved(self) -> dict[str, Any]:
        """What the hub keeps across its restarts (in ``get_state``, beside the spawn plan's)."""
        return {"companions": self.refs} if self.refs else {}

    def restore(self, saved: Mapping[str, Any]) -> None:
        self.refs = [ref for ref in saved.get("companions", []) if isinstance(ref, dict)]

    async def remove_quietly(self, api_client: Any, log: Any, server: str) -> None:
        """After a start that failed before its pod was created (nothing owns them); a failure is only logged:
        what the user reads says more."""
        if not self.refs:
            return
        try:
            await self.remove(api_client, log)
        except Exception as error:
            log.warning("fracnb: could not remove the objects of %s's failed start: %r", server, error)
